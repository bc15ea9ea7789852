"""Where uploaded media bytes live. Local disk now; the interface leaves room for S3."""

from __future__ import annotations

from typing import BinaryIO, Protocol

from starlette.requests import Request
from starlette.responses import Response


class Storage(Protocol):
    async def save(self, key: str, source: BinaryIO) -> int:
        """Store the stream under `key`; returns the number of bytes written."""

    async def delete(self, key: str) -> None: ...

    async def download_response(self, key: str, *, request: Request, media_type: str, filename: str) -> Response:
        """A response serving the object, honouring Range requests."""
