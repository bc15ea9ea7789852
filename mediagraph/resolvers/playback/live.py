"""Live playback statistics: a stream's or a channel's figures pushed as they change.

A notice (viewers joined or left, a heartbeat counted a play, or the periodic refresh
that also notices a new minute) makes the figures be read afresh; they are pushed only
when they differ from the last push, and carried on the push so its fields need no
second read.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from mediagraph.context import Context
from mediagraph.errors import ServiceUnavailable
from mediagraph.keys.playback import Entity
from mediagraph.resolvers.playback import BucketFigures, concurrent, current_minute, total
from mediagraph.subscriptions import playback as live


@dataclass(frozen=True)
class LiveStats:
    total: int
    # None while Redis is unreachable (the field then answers with SERVICE_UNAVAILABLE).
    concurrent: int | None
    minute: BucketFigures


async def live_stats(context: Context, entity: Entity) -> LiveStats:
    try:
        viewers: int | None = await concurrent(context, entity)
    except ServiceUnavailable:
        viewers = None
    return LiveStats(await total(context, entity), viewers, await current_minute(context, entity))


async def stats_updates(context: Context, entity: Entity) -> AsyncIterator[LiveStats]:
    """The entity's figures now, then whenever its total, concurrent viewers or current minute change."""
    shown: tuple[object, ...] | None = None
    async with contextlib.aclosing(live.stats_notices(context.services, entity)) as notices:
        async for _ in notices:
            # Whatever an earlier round loaded is stale by now.
            context.forget_loaded()
            stats = await live_stats(context, entity)
            # Only the public figures decide: watch time grows with every heartbeat, but it is
            # the owner's alone and never what makes a shared push.
            public = (stats.total, stats.concurrent, stats.minute.start, stats.minute.plays, stats.minute.peak)
            if public != shown:
                shown = public
                yield stats
