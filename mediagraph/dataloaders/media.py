from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from mediagraph.dataloaders.base import HotRowsByIdLoader, Loader
from mediagraph.db.media import BOOKMARKED_BY_USER, Media
from mediagraph.db.rows import RowBuilder, select_where_any

MEDIA_BY_ID = select_where_any(Media, "id")
media_rows = RowBuilder(Media)


class MediaByIdLoader(HotRowsByIdLoader[Media]):
    table = "media"
    statement = MEDIA_BY_ID
    rows = media_rows


class ViewerMarksLoader(Loader[int, bool]):
    """Whether the viewer has a row in a (user_id, media_id) table for each media id: bookmarks, likes."""

    statement: ClassVar[str]

    async def load_batch(self, keys: list[int]) -> Sequence[bool]:
        viewer_id = self.context.viewer_id
        if viewer_id is None:
            return [False] * len(keys)
        rows = await self.context.services.databases.main_reads.fetch(self.statement, viewer_id, keys)
        marked = {row["media_id"] for row in rows}
        return [key in marked for key in keys]


class BookmarkedByViewerLoader(ViewerMarksLoader):
    """Whether the viewer bookmarked each media id."""

    statement = BOOKMARKED_BY_USER
