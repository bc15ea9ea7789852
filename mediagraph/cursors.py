"""Opaque, signed cursors: clients pass them back verbatim, and cannot forge or mix them."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from functools import cache
from typing import Any

import orjson

from mediagraph.errors import BadUserInput

SIGNATURE_BYTES = 8


@cache
def _keyed(secret: str) -> hmac.HMAC:
    """The keyed hash with no message yet: copying it skips hashing the key for every cursor."""
    return hmac.new(secret.encode(), digestmod=hashlib.sha256)


def _signature(secret: str, body: bytes) -> bytes:
    signer = _keyed(secret).copy()
    signer.update(body)
    return signer.digest()[:SIGNATURE_BYTES]


def encode_cursor(secret: str, kind: str, values: list[Any]) -> str:
    body = orjson.dumps([kind, values])
    return base64.urlsafe_b64encode(_signature(secret, body) + body).decode().rstrip("=")


def decode_cursor(secret: str, kind: str, cursor: str) -> list[Any]:
    invalid = BadUserInput("The cursor is invalid; start again without `after`.")
    if len(cursor) > 2048:
        raise invalid
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise invalid from None
    signature, body = raw[:SIGNATURE_BYTES], raw[SIGNATURE_BYTES:]
    expected = _signature(secret, body)
    if not hmac.compare_digest(signature, expected):
        raise invalid
    try:
        cursor_kind, values = orjson.loads(body)
    except (orjson.JSONDecodeError, ValueError, TypeError):
        raise invalid from None
    if cursor_kind != kind or not isinstance(values, list):
        raise invalid
    return values


def encode_id_cursor(secret: str, kind: str, value: int) -> str:
    """A keyset cursor holding one id (the last row of a page)."""
    return encode_cursor(secret, kind, [value])


def decode_id_cursor(secret: str, kind: str, cursor: str | None, *, argument: str = "after") -> int | None:
    if cursor is None:
        return None
    values = decode_cursor(secret, kind, cursor)
    if len(values) != 1 or not isinstance(values[0], int) or isinstance(values[0], bool) or values[0] < 1:
        raise BadUserInput(f"The cursor is invalid; start again without `{argument}`.", argument=argument)
    return values[0]
