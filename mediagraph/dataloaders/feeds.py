from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mediagraph.dataloaders.base import Loader
from mediagraph.db.feeds import FOLLOWED_BY_USER, FollowCount, Post
from mediagraph.db.rows import RowBuilder, select_where_any

POSTS_BY_ID = select_where_any(Post, "id")
FOLLOW_COUNTS_BY_USER_ID = select_where_any(FollowCount, "user_id")
post_rows = RowBuilder(Post)


class PostByIdLoader(Loader[int, Post | None]):
    async def load_batch(self, keys: list[int]) -> Sequence[Post | None]:
        found = await self.context.services.databases.main_reads.fetch_keyed(POSTS_BY_ID, "id", keys)
        return [post_rows(found[key]) if key in found else None for key in keys]


@dataclass(frozen=True)
class FollowCounts:
    followers: int
    following: int


class FollowCountsByUserIdLoader(Loader[int, FollowCounts]):
    async def load_batch(self, keys: list[int]) -> Sequence[FollowCounts]:
        reads = self.context.services.databases.main_reads
        found = await reads.fetch_keyed(FOLLOW_COUNTS_BY_USER_ID, "user_id", keys)
        return [
            FollowCounts(found[key]["follower_count"], found[key]["following_count"]) if key in found
            else FollowCounts(0, 0)
            for key in keys
        ]


class FollowedByViewerLoader(Loader[int, bool]):
    """Whether the viewer follows each user id."""

    async def load_batch(self, keys: list[int]) -> Sequence[bool]:
        viewer_id = self.context.viewer_id
        if viewer_id is None:
            return [False] * len(keys)
        rows = await self.context.services.databases.main_reads.fetch(FOLLOWED_BY_USER, viewer_id, keys)
        followed = {row["followee_id"] for row in rows}
        return [key in followed for key in keys]

