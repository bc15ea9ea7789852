from __future__ import annotations

from collections.abc import Sequence

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


class BookmarkedByViewerLoader(Loader[int, bool]):
    """Whether the viewer bookmarked each media id."""

    async def load_batch(self, keys: list[int]) -> Sequence[bool]:
        viewer_id = self.context.viewer_id
        if viewer_id is None:
            return [False] * len(keys)
        async with self.context.db.use() as session:
            rows = await session.execute(
                select(col(Bookmark.media_id)).where(
                    col(Bookmark.user_id) == viewer_id,
                    col(Bookmark.media_id).in_(keys),
                )
            )
            marked = set(rows.scalars())
        return [key in marked for key in keys]
