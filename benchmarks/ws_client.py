"""A lean graphql-transport-ws client for thousands of sockets per process.

Ten thousand subscribers of a general-purpose client cost the client machine more CPU
per update than the server spends: its own delay would swamp the server's. This one
speaks just enough of RFC 6455 (handshake, masked text frames out, unmasked frames
in, ping/pong, close) and of graphql-transport-ws (init, subscribe, pong) to
subscribe, and stamps each `next` message with the wall clock the moment its bytes
arrive, before any parsing.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import cast

import orjson

OPCODE_TEXT = 0x1
OPCODE_CLOSE = 0x8
OPCODE_PING = 0x9
OPCODE_PONG = 0xA
COUNT = re.compile(rb'"viewCount":(\d+)')


def frame(opcode: int, payload: bytes) -> bytes:
    """A client frame: FIN set, masked as RFC 6455 requires of clients."""
    mask = os.urandom(4)
    length = len(payload)
    if length < 126:
        header = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
    elif length < 1 << 16:
        header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
    else:
        header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
    key = int.from_bytes((mask * (length // 4 + 1))[:length], "big") if length else 0
    masked = (int.from_bytes(payload, "big") ^ key).to_bytes(length, "big") if length else b""
    return header + mask + masked


def message(payload: object) -> bytes:
    return frame(OPCODE_TEXT, orjson.dumps(payload))


@dataclass
class Subscription(asyncio.Protocol):
    """One socket, one subscription; `received` holds (viewCount, wall-clock arrival) per `next`."""

    host: str
    port: int
    query: str
    variables: dict[str, object]
    subscribed: asyncio.Future[None]
    received: list[tuple[int, float]] = field(default_factory=list)
    errors: list[bytes] = field(default_factory=list)
    transport: asyncio.Transport | None = None
    _buffer: bytearray = field(default_factory=bytearray)
    _upgraded: bool = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast("asyncio.Transport", transport)
        key = base64.b64encode(os.urandom(16)).decode()
        self.transport.write(
            (
                "GET /graphql HTTP/1.1\r\n"
                f"Host: {self.host}:{self.port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                "Sec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n"
            ).encode()
        )

    def data_received(self, data: bytes) -> None:
        arrived = time.time()
        self._buffer += data
        if not self._upgraded:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            status = bytes(self._buffer[: self._buffer.find(b"\r\n")])
            if b" 101 " not in status:
                self._fail(f"handshake refused: {status!r}")
                return
            del self._buffer[: end + 4]
            self._upgraded = True
            self._send({"type": "connection_init", "payload": {}})
        for opcode, payload in self._frames():
            self._handle(opcode, payload, arrived)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(f"connection lost: {exc}")

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(frame(OPCODE_CLOSE, struct.pack("!H", 1000)))
            self.transport.close()

    def _frames(self) -> list[tuple[int, bytes]]:
        frames = []
        buffer = self._buffer
        while len(buffer) >= 2:
            opcode = buffer[0] & 0x0F
            length = buffer[1] & 0x7F
            start = 2
            if length == 126:
                if len(buffer) < 4:
                    break
                (length,) = struct.unpack_from("!H", buffer, 2)
                start = 4
            elif length == 127:
                if len(buffer) < 10:
                    break
                (length,) = struct.unpack_from("!Q", buffer, 2)
                start = 10
            if len(buffer) < start + length:
                break
            frames.append((opcode, bytes(buffer[start : start + length])))
            del buffer[: start + length]
        return frames

    def _handle(self, opcode: int, payload: bytes, arrived: float) -> None:
        if opcode == OPCODE_PING:
            assert self.transport is not None
            self.transport.write(frame(OPCODE_PONG, payload))
        elif opcode == OPCODE_CLOSE:
            self._fail(f"closed by the server: {payload!r}")
        elif opcode == OPCODE_TEXT:
            if b'"type":"next"' in payload:
                found = COUNT.search(payload)
                if found is None or b'"errors"' in payload:
                    self.errors.append(payload)
                else:
                    self.received.append((int(found.group(1)), arrived))
                if not self.subscribed.done():
                    self.subscribed.set_result(None)
            elif b'"connection_ack"' in payload:
                self._send(
                    {
                        "id": uuid.uuid4().hex[:8],
                        "type": "subscribe",
                        "payload": {"query": self.query, "variables": self.variables},
                    }
                )
            elif b'"type":"ping"' in payload:
                self._send({"type": "pong"})
            else:
                self.errors.append(payload)

    def _send(self, payload: object) -> None:
        assert self.transport is not None
        self.transport.write(message(payload))

    def _fail(self, reason: str) -> None:
        if not self.subscribed.done():
            self.subscribed.set_exception(ConnectionError(reason))
