"""Counts read with a page's rows: no loader per count, no awaitable per item.

The page's statement brings each row's flushed views and exact likes
(`db/views/pages.py: COUNTED_MEDIA`); views not flushed yet come from Redis in one
round trip for the whole page, often in the same pipeline as the page's other Redis
work. Only a flush caught in flight costs one more read (`view_totals_after`).
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg
from redis.exceptions import RedisError

from mediagraph.context import Context
from mediagraph.dataloaders.views import view_buffer, view_totals_after, without_redis
from mediagraph.db.media import MediaCounts
from mediagraph.keys.views import Unflushed, UnflushedRead


def unflushed_read(context: Context, rows: Sequence[asyncpg.Record]) -> UnflushedRead:
    """The Redis reads of the rows' views not flushed yet, for a caller's pipeline."""
    return view_buffer(context.services).queue_unflushed(None, [row["id"] for row in rows])


async def counts_of(
    context: Context, rows: Sequence[asyncpg.Record], unflushed: Unflushed | None
) -> dict[int, MediaCounts]:
    """Each row's counts: likes as read, views with `unflushed` added (None: views were not asked for)."""
    if unflushed is None:
        return {row["id"]: MediaCounts(None, row["exact_likes"]) for row in rows}
    durable = {row["id"]: row["flushed_views"] for row in rows}
    views = await view_totals_after(context.services, durable, unflushed)
    return {row["id"]: MediaCounts(views[row["id"]], row["exact_likes"]) for row in rows}


async def read_counts(context: Context, rows: Sequence[asyncpg.Record], *, views: bool) -> dict[int, MediaCounts]:
    """Counts of rows read on their own (no other Redis work to share a round trip with)."""
    unflushed = None
    if views and rows:
        try:
            unflushed = await view_buffer(context.services).read_unflushed([row["id"] for row in rows])
        except (RedisError, OSError) as error:
            unflushed = without_redis(error)
    return await counts_of(context, rows, unflushed)
