"""The request id: taken from `X-Request-ID` (bounded, sanitised) or made up, and kept in a context variable.

Log records, error extensions and spans read it from `CURRENT`, so whatever runs for a
request (resolvers, loaders, the tasks they start) carries its id without passing it
along. A client's id is trusted only as a label: at most `MAX_LENGTH` characters of
letters, digits and `-_.:/+=`; anything else is removed, and an id left empty is made up.
"""

from __future__ import annotations

import contextvars
import itertools
import secrets
from typing import Any

from starlette.types import Message, Send

HEADER = b"x-request-id"
MAX_LENGTH = 64
ALLOWED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.:/+=")
_REMOVED = bytes(byte for byte in range(256) if byte not in ALLOWED)

CURRENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("mediagraph_request_id", default=None)

# Made-up ids: this process's random prefix and a counter, unique across processes and cheap
# (a uuid4 per request costs more than the rest of this module's work together).
_PROCESS = secrets.token_hex(6)
_numbers = itertools.count(1)


def new_request_id() -> str:
    return f"{_PROCESS}-{next(_numbers):x}"


def sanitised(value: bytes) -> str | None:
    """The usable part of a client's id, or None when nothing of it is usable."""
    kept = value[: MAX_LENGTH * 4].translate(None, _REMOVED)[:MAX_LENGTH]
    return kept.decode("ascii") if kept else None


def from_headers(headers: list[tuple[bytes, bytes]]) -> str:
    for name, value in headers:
        if name == HEADER:
            return sanitised(value) or new_request_id()
    return new_request_id()


def sending_request_id(send: Send, request_id: str) -> Send:
    """`send`, adding the `x-request-id` header to the response."""
    encoded = request_id.encode()

    async def send_with_id(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", ()), (HEADER, encoded)]
        await send(message)

    return send_with_id


def tag_errors(errors: list[dict[str, Any]]) -> None:
    """Add the request id to formatted errors' extensions, so a client can quote it to an operator."""
    request_id = CURRENT.get()
    if request_id is None:
        return
    for error in errors:
        # A copy: formatted errors share their extensions with the error objects.
        error["extensions"] = {**(error.get("extensions") or {}), "requestId": request_id}


def tagged(extensions: dict[str, Any] | None) -> dict[str, Any] | None:
    """`extensions` with the request id added (a new dict), or as they are without one."""
    request_id = CURRENT.get()
    if request_id is None:
        return extensions
    return {**(extensions or {}), "requestId": request_id}
