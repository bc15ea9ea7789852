from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlmodel import col

from mediagraph.dataloaders.base import Loader
from mediagraph.db.feeds import Follow, FollowCount, Post


class PostByIdLoader(Loader[int, Post | None]):
    async def load_batch(self, keys: list[int]) -> Sequence[Post | None]:
        async with self.context.db.use() as session:
            rows = (await session.execute(select(Post).where(col(Post.id).in_(keys)))).scalars()
            found = {post.id: post for post in rows}
        return [found.get(key) for key in keys]


@dataclass(frozen=True)
class FollowCounts:
    followers: int
    following: int


class FollowCountsByUserIdLoader(Loader[int, FollowCounts]):
    async def load_batch(self, keys: list[int]) -> Sequence[FollowCounts]:
        async with self.context.db.use() as session:
            rows = (await session.execute(select(FollowCount).where(col(FollowCount.user_id).in_(keys)))).scalars()
            found = {row.user_id: FollowCounts(row.follower_count, row.following_count) for row in rows}
        return [found.get(key, FollowCounts(0, 0)) for key in keys]


class FollowedByViewerLoader(Loader[int, bool]):
    """Whether the viewer follows each user id."""

    async def load_batch(self, keys: list[int]) -> Sequence[bool]:
        viewer_id = self.context.viewer_id
        if viewer_id is None:
            return [False] * len(keys)
        async with self.context.db.use() as session:
            rows = await session.execute(
                select(col(Follow.followee_id)).where(
                    col(Follow.follower_id) == viewer_id, col(Follow.followee_id).in_(keys)
                )
            )
            followed = set(rows.scalars())
        return [key in followed for key in keys]
