"""Request body limits: refused before anything buffers or parses them.

Every route goes through `BodySizeLimit`; the GraphQL fast path, which starts
before the middleware, reads its body with `read_json_body` under the same limit.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mediagraph.settings import Settings

# Room for the multipart envelope and the operations/map fields around the file.
MULTIPART_OVERHEAD_BYTES = 1024 * 1024
JSON_BODY_LIMIT_BYTES = 1024 * 1024


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        self.limit = limit


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return value  # type: ignore[no-any-return]
    return None


def _check_declared(scope: Scope, limit: int) -> None:
    declared = header(scope, b"content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise BodyTooLarge(limit)


def limited(receive: Receive, limit: int) -> Receive:
    received = 0

    async def limited_receive() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise BodyTooLarge(limit)
        return message

    return limited_receive


async def read_json_body(scope: Scope, receive: Receive) -> bytes:
    """The whole body; raises BodyTooLarge past the JSON limit, declared or actual."""
    _check_declared(scope, JSON_BODY_LIMIT_BYTES)
    receive = limited(receive, JSON_BODY_LIMIT_BYTES)
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def too_large(send: Send, limit: int) -> None:
    body = (
        b'{"errors":[{"message":"The request body is larger than '
        + str(limit).encode()
        + b' bytes.","extensions":{"code":"PAYLOAD_TOO_LARGE"}}]}'
    )
    await send({"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


class BodySizeLimit:
    def __init__(self, app: ASGIApp, *, settings: Settings) -> None:
        self.app = app
        self.multipart_limit = settings.max_upload_bytes + MULTIPART_OVERHEAD_BYTES

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        content_type = (header(scope, b"content-type") or b"").decode("latin-1")
        limit = self.multipart_limit if content_type.startswith("multipart/") else JSON_BODY_LIMIT_BYTES
        try:
            _check_declared(scope, limit)
            await self.app(scope, limited(receive, limit), send)
        except BodyTooLarge:
            await too_large(send, limit)
