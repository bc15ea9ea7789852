"""Snowflake ids for every entity, and the opaque global ids clients see.

A snowflake is [1 unused bit][41-bit ms since EPOCH][10-bit node][12-bit sequence],
so ids sort by creation time and stay unique across processes with distinct node ids.
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from mediagraph.errors import BadUserInput

EPOCH_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
NODE_BITS = 10
SEQUENCE_BITS = 12
MAX_SEQUENCE = (1 << SEQUENCE_BITS) - 1
MAX_ID = (1 << 63) - 1
MAX_ID_PARTS = 3
# A global id's raw parts: snowflakes and other positive integers, or a uuid (a play's session).
IdPart = int | uuid.UUID
UUID_TEXT_LENGTH = 36  # 8-4-4-4-12 hex digits and dashes


class SnowflakeGenerator:
    def __init__(self, node_id: int, clock: Callable[[], float] = time.time) -> None:
        if not 0 <= node_id < (1 << NODE_BITS):
            raise ValueError("node id must fit in 10 bits")
        self._node_id = node_id
        self._clock = clock
        self._last_ms = -1
        self._sequence = 0
        self._lock = threading.Lock()

    def next_id(self) -> int:
        with self._lock:
            now_ms = int(self._clock() * 1000) - EPOCH_MS
            # A clock that steps backwards (NTP) must never reissue an id: keep
            # counting on the last timestamp instead of waiting for the clock.
            if now_ms <= self._last_ms:
                now_ms = self._last_ms
                self._sequence += 1
                if self._sequence > MAX_SEQUENCE:
                    # Borrow the next millisecond; the real clock catches up later.
                    now_ms += 1
                    self._sequence = 0
            else:
                # Keep counting instead of restarting at 0: the low bits then take every
                # value in turn, so `id mod L` (the logical shard of a media) spreads
                # evenly even when ids are issued less often than once a millisecond.
                self._sequence = (self._sequence + 1) & MAX_SEQUENCE
            self._last_ms = now_ms
            return (now_ms << (NODE_BITS + SEQUENCE_BITS)) | (self._node_id << SEQUENCE_BITS) | self._sequence


def snowflake_time(snowflake: int) -> datetime:
    ms = (snowflake >> (NODE_BITS + SEQUENCE_BITS)) + EPOCH_MS
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def snowflake_floor(moment: datetime) -> int:
    """The smallest id that can have been issued at or after `moment`."""
    ms = int(moment.timestamp() * 1000) - EPOCH_MS
    return max(ms, 0) << (NODE_BITS + SEQUENCE_BITS)


def to_global_id(type_name: str, raw_id: IdPart, *more_ids: IdPart) -> str:
    """`more_ids` for objects addressed by several ids (a comment: its media id and its own; a play: its
    channel, its start in ms and its session uuid)."""
    text = ":".join((type_name, *(str(part) for part in (raw_id, *more_ids))))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def parse_global_id(global_id: str) -> tuple[str, tuple[IdPart, ...]]:
    # Every request names ids: the error is only built for one that is malformed.
    if len(global_id) > 200:
        raise _malformed(global_id)
    try:
        padded = global_id + "=" * (-len(global_id) % 4)
        type_name, *raw = base64.urlsafe_b64decode(padded.encode()).decode().split(":")
        raw_ids = tuple(_part(part) for part in raw)
    except (ValueError, binascii.Error, UnicodeError):
        raise _malformed(global_id) from None
    if not type_name or not raw_ids or len(raw_ids) > MAX_ID_PARTS:
        raise _malformed(global_id)
    if not all(isinstance(raw_id, uuid.UUID) or 0 < raw_id <= MAX_ID for raw_id in raw_ids):
        raise _malformed(global_id)
    return type_name, raw_ids


def _malformed(global_id: str) -> BadUserInput:
    return BadUserInput(f"Malformed id {global_id[:40]!r}.")


def _part(text: str) -> IdPart:
    if len(text) == UUID_TEXT_LENGTH:
        # Only the form `to_global_id` writes, so one object never has two ids.
        session = uuid.UUID(text)
        if str(session) != text:
            raise ValueError(text)
        return session
    return int(text)


def _integer_parts(global_id: str, raw_ids: tuple[IdPart, ...]) -> tuple[int, ...]:
    """The parts of an id whose every part is an integer; BAD_USER_INPUT otherwise."""
    integers = tuple(raw_id for raw_id in raw_ids if isinstance(raw_id, int))
    if len(integers) != len(raw_ids):
        raise _malformed(global_id)
    return integers


def from_global_id(global_id: str) -> tuple[str, int]:
    type_name, parts = parse_global_id(global_id)
    raw_ids = _integer_parts(global_id, parts)
    if len(raw_ids) != 1:
        raise _malformed(global_id)
    return type_name, raw_ids[0]


def decode_id(global_id: str, expected_type: str) -> int:
    # Nearly every request decodes an id: the common form (`Type:digits`) is read in one pass,
    # and everything else (other forms, errors) by `from_global_id`, which gives the same answer.
    if len(global_id) <= 200:
        try:
            text = base64.urlsafe_b64decode(global_id + "=" * (-len(global_id) % 4)).decode()
        except (ValueError, binascii.Error, UnicodeError):
            text = ""
        type_name, colon, digits = text.partition(":")
        plain = colon and digits.isascii() and digits.isdigit() and len(digits) != UUID_TEXT_LENGTH
        if plain and type_name == expected_type and 0 < (raw_id := int(digits)) <= MAX_ID:
            return raw_id
    type_name, raw_id = from_global_id(global_id)
    if type_name != expected_type:
        raise BadUserInput(f"Expected a {expected_type} id, got a {type_name} id.")
    return raw_id


def decode_ids(global_id: str, expected_type: str, count: int) -> tuple[int, ...]:
    type_name, parts = parse_global_id(global_id)
    raw_ids = _integer_parts(global_id, parts)
    if type_name != expected_type:
        raise BadUserInput(f"Expected a {expected_type} id, got a {type_name} id.")
    if len(raw_ids) != count:
        raise _malformed(global_id)
    return raw_ids
