from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager

from redis.exceptions import RedisError
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from mediagraph.dataloaders.base import Loader
from mediagraph.dataloaders.media import ViewerMarksLoader
from mediagraph.db.views import MediaLikeCount, store
from mediagraph.keys.views import Unflushed, ViewBuffer
from mediagraph.services import Services

log = logging.getLogger(__name__)

SessionScope = Callable[[], AbstractAsyncContextManager[AsyncSession]]


def view_buffer(services: Services) -> ViewBuffer:
    return ViewBuffer(services.redis, services.keys, services.settings.view_buckets)


async def live_view_totals(services: Services, session_scope: SessionScope, media_ids: list[int]) -> dict[int, int]:
    """Views in PostgreSQL plus views still in Redis, for many media: one Redis round trip, one query.

    Redis is read first. A batch it reports in flight may be applied before the query
    runs; the query says which were, and those are counted once, from PostgreSQL. (A
    batch both taken and applied in the instant between the two reads is counted twice by
    this one read.) Redis being down leaves the durable figure.
    """
    try:
        unflushed = await view_buffer(services).read_unflushed(media_ids)
    except (RedisError, OSError) as error:
        log.warning("view counts without Redis (%s): showing flushed counts only", error)
        unflushed = Unflushed(pending={}, in_flight={})
    async with session_scope() as session:
        rows = await store.durable_view_counts(session, media_ids, list(unflushed.in_flight))
    totals = {media_id: count + unflushed.pending.get(media_id, 0) for media_id, count, _ in rows}
    applied = set(rows[0][2] or ()) if rows else set()
    for batch_id, shares in unflushed.in_flight.items():
        if batch_id not in applied:
            for media_id, views in shares.items():
                totals[media_id] += views
    return totals


class ViewCountByMediaIdLoader(Loader[int, int]):
    async def load_batch(self, keys: list[int]) -> Sequence[int]:
        totals = await live_view_totals(self.context.services, self.context.db.use, keys)
        return [totals[key] for key in keys]


class LikeCountByMediaIdLoader(Loader[int, int]):
    async def load_batch(self, keys: list[int]) -> Sequence[int]:
        async with self.context.db.use() as session:
            rows = await session.execute(
                select(col(MediaLikeCount.media_id), col(MediaLikeCount.like_count)).where(
                    col(MediaLikeCount.media_id).in_(keys)
                )
            )
            counts: dict[int, int] = dict(rows.all())
        return [counts.get(key, 0) for key in keys]


class LikedByViewerLoader(ViewerMarksLoader):
    """Whether the viewer likes each media id."""

    statement = store.LIKED_BY_USER
