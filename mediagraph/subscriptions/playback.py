"""Live viewer counts: the count at once, then each change, at most once a second.

Heartbeats publish when a count changes; sessions also expire without anyone calling, so
while a subscription lives it keeps its entity on the worker's sweep list (a lease in
Redis), and the worker publishes the drops. Publishers on several processes race, so
every count carries a version and only newer ones are pushed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator

from redis.exceptions import RedisError

from mediagraph.context import Context
from mediagraph.dataloaders.playback import REDIS_UNREACHABLE
from mediagraph.errors import ServiceUnavailable
from mediagraph.keys.playback import (
    Counter,
    Entity,
    counter_key,
    live_channel,
    live_key,
    stats_channel,
    to_ms,
    watched_key,
    watched_member,
)
from mediagraph.services import Services

log = logging.getLogger(__name__)

# The lease is renewed a few times within its length, so a subscription stays on the
# sweep list while it lives and drops off soon after its process dies.
WATCH_LEASE_MS = 15_000
# Statistics are re-read at most once a second, and at least this often: a new minute
# starts without any message, and a message lost while pub/sub reconnected is made up for.
STATS_MIN_INTERVAL_SECONDS = 1.0
STATS_REFRESH_SECONDS = 10.0


async def live_viewers(context: Context, entity: Entity) -> AsyncIterator[int]:
    """The entity's concurrent viewers now, then each change, at most once a second."""
    services = context.services
    channel = live_channel(services.keys, entity)
    async with services.bus.subscribe(channel, keep=1, min_interval=1.0) as events, _watching(services, entity):
        viewers, version = await _live_snapshot(context, entity)
        yield viewers
        async for payload in events:
            # Heartbeats on several processes publish concurrently; only newer states count.
            if payload["version"] <= version:
                continue
            version = payload["version"]
            if payload["viewers"] != viewers:
                viewers = payload["viewers"]
                yield viewers


async def stats_notices(
    services: Services, entity: Entity, *, refresh_seconds: float | None = None
) -> AsyncGenerator[None, None]:
    """Once at once, then whenever the entity's viewers or counts may have changed, and at least
    every `refresh_seconds` (default `STATS_REFRESH_SECONDS`)."""
    channels = [live_channel(services.keys, entity), stats_channel(services.keys, entity)]
    notices = services.bus.notices(
        channels, min_interval=STATS_MIN_INTERVAL_SECONDS, refresh_seconds=refresh_seconds or STATS_REFRESH_SECONDS
    )
    # Watching keeps the entity on the worker's sweep list, so sessions expiring are announced too.
    async with notices as fired_channels, _watching(services, entity):
        async for _ in fired_channels:
            yield None


async def _live_snapshot(context: Context, entity: Entity) -> tuple[int, int]:
    services = context.services
    since = to_ms(services.clock()) - context.settings.playback_live_window_seconds * 1000
    try:
        # One transaction, so the version matches the count it is read with.
        async with services.redis.pipeline(transaction=True) as pipe:
            pipe.hget(counter_key(services.keys, Counter(entity)), "v")
            pipe.zcount(live_key(services.keys, entity), since, "+inf")
            version, viewers = await pipe.execute()
    except REDIS_UNREACHABLE:
        raise ServiceUnavailable("Live viewer counts are unavailable right now.") from None
    return int(viewers), int(version or 0)


@contextlib.asynccontextmanager
async def _watching(services: Services, entity: Entity) -> AsyncIterator[None]:
    """Keep the entity on the worker's sweep list while the subscription lives."""
    key, member = watched_key(services.keys), watched_member(entity)

    async def renew() -> None:
        await services.redis.zadd(key, {member: to_ms(services.clock()) + WATCH_LEASE_MS})

    async def keep_renewing() -> None:
        while True:
            await asyncio.sleep(WATCH_LEASE_MS / 3000)
            try:
                await renew()
            except RedisError as error:
                log.warning("could not renew the live-viewers lease of %s: %s", member, error)

    await renew()
    task = asyncio.create_task(keep_renewing())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
