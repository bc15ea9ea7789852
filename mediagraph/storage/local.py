from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import uuid
from pathlib import Path
from typing import BinaryIO

from starlette.requests import Request
from starlette.responses import FileResponse, Response

from mediagraph.errors import NotFound

CHUNK = 1024 * 1024


class LocalStorage:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root not in path.parents:
            raise ValueError(f"storage key escapes the storage root: {key!r}")
        return path

    async def save(self, key: str, source: BinaryIO) -> int:
        return await asyncio.to_thread(self._save_sync, key, source)

    def _save_sync(self, key: str, source: BinaryIO) -> int:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write beside the target and rename, so a reader never sees half a file.
        partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}.part")
        try:
            with partial.open("wb") as target:
                shutil.copyfileobj(source, target, CHUNK)
                size = target.tell()
            os.replace(partial, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
        return size

    async def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(self._path(key).unlink)

    async def download_response(self, key: str, *, request: Request, media_type: str, filename: str) -> Response:
        path = self._path(key)
        if not path.is_file():
            raise NotFound("The media content is missing.")
        # Starlette's FileResponse answers Range requests (206, Content-Range, 416).
        return FileResponse(path, media_type=media_type, filename=filename, content_disposition_type="inline")
