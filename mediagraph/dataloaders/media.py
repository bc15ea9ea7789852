from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from sqlalchemy import select
from sqlmodel import col

from mediagraph.dataloaders.base import Loader
from mediagraph.db.media import Bookmark, Media


class MediaByIdLoader(Loader[int, Media | None]):
    async def load_batch(self, keys: list[int]) -> Sequence[Media | None]:
        async with self.context.db.use() as session:
            rows = (await session.execute(select(Media).where(Media.id.in_(keys)))).scalars()  # type: ignore[attr-defined]
            found = {media.id: media for media in rows}
        return [found.get(key) for key in keys]


class ViewerMarksLoader(Loader[int, bool]):
    """Whether the viewer has a row in a (user, media) table for each media id: bookmarks, likes."""

    # (user column, media column), in a tuple: a bare column attribute would bind to the loader.
    columns: ClassVar[tuple[Any, Any]]

    async def load_batch(self, keys: list[int]) -> Sequence[bool]:
        viewer_id = self.context.viewer_id
        if viewer_id is None:
            return [False] * len(keys)
        user_column, media_column = self.columns
        async with self.context.db.use() as session:
            rows = await session.execute(select(media_column).where(user_column == viewer_id, media_column.in_(keys)))
            marked = set(rows.scalars())
        return [key in marked for key in keys]


class BookmarkedByViewerLoader(ViewerMarksLoader):
    """Whether the viewer bookmarked each media id."""

    columns = (col(Bookmark.user_id), col(Bookmark.media_id))
