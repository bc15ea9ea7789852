"""Live playback statistics: a stream's or a channel's figures pushed as they change.

A notice (viewers joined or left, a heartbeat counted a play, or the periodic refresh
that also notices a new minute) makes the figures be read afresh; they are pushed only
when they differ from the last push, and carried on the push so its fields need no
second read.

Watch time grows with every heartbeat without any notice. A subscription of the channel
owner that asks for it (run for that subscriber alone: the fields are viewer-dependent)
re-reads at least once per roll-up interval and pushes when watch time moved, so the
owner's figures move as the roll-up's do; everyone else's pushes stay as they were.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from mediagraph.context import Context
from mediagraph.dataloaders.playback import Figures
from mediagraph.errors import ServiceUnavailable
from mediagraph.keys.playback import Entity
from mediagraph.resolvers.playback import BucketFigures, concurrent, current_minute, total, watch_totals
from mediagraph.subscriptions import playback as live


@dataclass(frozen=True)
class LiveStats:
    total: int
    # None while Redis is unreachable (the field then answers with SERVICE_UNAVAILABLE).
    concurrent: int | None
    minute: BucketFigures
    # All-time plays and watch time, read only for a subscription of the channel owner that asks for them.
    watch: Figures | None = None


async def live_stats(context: Context, entity: Entity, *, watch_time: bool = False) -> LiveStats:
    try:
        viewers: int | None = await concurrent(context, entity)
    except ServiceUnavailable:
        viewers = None
    watch = await watch_totals(context, entity) if watch_time else None
    return LiveStats(await total(context, entity), viewers, await current_minute(context, entity), watch)


async def stats_updates(context: Context, entity: Entity, *, watch_time: bool = False) -> AsyncIterator[LiveStats]:
    """The entity's figures now, then whenever its total, concurrent viewers or current minute change;
    with `watch_time` (the owner's own subscription), also whenever watch time moves."""
    owner = watch_time and context.viewer_id == entity.channel
    refresh = min(live.STATS_REFRESH_SECONDS, context.settings.playback_rollup_interval_seconds) if owner else None
    shown: tuple[object, ...] | None = None
    async with contextlib.aclosing(live.stats_notices(context.services, entity, refresh_seconds=refresh)) as notices:
        async for _ in notices:
            # Whatever an earlier round loaded is stale by now.
            context.forget_loaded()
            stats = await live_stats(context, entity, watch_time=owner)
            figures: tuple[object, ...] = (
                stats.total,
                stats.concurrent,
                stats.minute.start,
                stats.minute.plays,
                stats.minute.peak,
            )
            # Watch time decides only for the owner: a shared push (public figures) never moves for it.
            if stats.watch is not None:
                figures += (stats.watch.watch_ms, stats.minute.watch_ms, stats.minute.unique_viewers)
            if figures != shown:
                shown = figures
                yield stats
