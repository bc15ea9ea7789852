from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from uuid import UUID

from redis.exceptions import RedisError

from mediagraph.dataloaders.base import Loader
from mediagraph.dataloaders.media import ViewerMarksLoader
from mediagraph.db.views import store
from mediagraph.keys.views import Unflushed, ViewBuffer
from mediagraph.services import Services

log = logging.getLogger(__name__)

NOTHING_UNFLUSHED = Unflushed(pending={}, in_flight={})


def view_buffer(services: Services) -> ViewBuffer:
    return ViewBuffer(services.redis, services.keys, services.settings.view_buckets)


def without_redis(error: Exception) -> Unflushed:
    """Redis being down leaves the durable figures."""
    log.warning("view counts without Redis (%s): showing flushed counts only", error)
    return NOTHING_UNFLUSHED


def _totals(durable: Mapping[int, int], unflushed: Unflushed, applied: set[UUID]) -> dict[int, int]:
    totals = {media_id: count + unflushed.pending.get(media_id, 0) for media_id, count in durable.items()}
    for batch_id, shares in unflushed.in_flight.items():
        if batch_id not in applied:
            for media_id, views in shares.items():
                if media_id in totals:
                    totals[media_id] += views
    return totals


async def live_view_totals(services: Services, media_ids: Sequence[int]) -> dict[int, int]:
    """Views in PostgreSQL plus views still in Redis, for many media: one Redis round trip, one query.

    Redis is read first. A batch it reports in flight may be applied before the query
    runs; the query says which were, and those are counted once, from PostgreSQL. (A
    batch both taken and applied in the instant between the two reads is counted twice by
    this one read.) Redis being down leaves the durable figure.
    """
    try:
        unflushed = await view_buffer(services).read_unflushed(media_ids)
    except (RedisError, OSError) as error:
        unflushed = without_redis(error)
    durable, applied = await store.durable_view_counts(
        services.databases.main_reads, media_ids, list(unflushed.in_flight)
    )
    return _totals(durable, unflushed, applied)


async def view_totals_after(services: Services, durable: Mapping[int, int], unflushed: Unflushed) -> dict[int, int]:
    """Totals of media whose flushed views were read with their rows, before Redis was read.

    Usually no flush is in flight and the sum is all there is. A batch in flight may have
    been applied before the rows were read (counted in both) or after (in neither's durable
    part): its media are read again, after Redis, as `live_view_totals` reads. (A batch
    taken, applied and dropped in the instant between the rows and the Redis read is missed
    by this one read: the mirror image of `live_view_totals`' instant.)
    """
    if not any(unflushed.in_flight.values()):
        return {media_id: count + unflushed.pending.get(media_id, 0) for media_id, count in durable.items()}
    fresh, applied = await store.durable_view_counts(
        services.databases.main_reads, list(durable), list(unflushed.in_flight)
    )
    return _totals(fresh, unflushed, applied)


class ViewCountByMediaIdLoader(Loader[int, int]):
    async def load_batch(self, keys: list[int]) -> Sequence[int]:
        totals = await live_view_totals(self.context.services, keys)
        return [totals[key] for key in keys]


class LikeCountByMediaIdLoader(Loader[int, int]):
    async def load_batch(self, keys: list[int]) -> Sequence[int]:
        counts = await store.like_counts(self.context.services.databases.main_reads, keys)
        return [counts[key] for key in keys]


class LikedByViewerLoader(ViewerMarksLoader):
    """Whether the viewer likes each media id."""

    statement = store.LIKED_BY_USER
