"""`mediagraph worker hot`: keeps each day's hot-media scores from the engagement stream.

A consumer group shares the stream among any number of copies. Each event is applied
and acknowledged by one script, so it counts exactly once even when a slow consumer's
event was claimed by another (XAUTOCLAIM) and both try it. Days whose scores are not
in Redis yet are recomputed from the database before their events apply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections import defaultdict
from datetime import date, datetime
from typing import Any

from redis.exceptions import ResponseError

from mediagraph.db.base import utcnow
from mediagraph.events import EngagementEvent
from mediagraph.keys.events import engagement_stream
from mediagraph.keys.hot import day_scores, day_state
from mediagraph.keys.hot.lua import APPLY
from mediagraph.observability.metrics import Lag
from mediagraph.pubsub.streams import group_backlog
from mediagraph.resolvers.hot.days import (
    WEIGHTS,
    announce_day,
    finalize_day,
    kept_days,
    kept_until,
    live_until,
    media_day,
    rebuild_day,
)
from mediagraph.services import Services

log = logging.getLogger(__name__)

NAME = "hot"
GROUP = "hot"
BATCH = 500
BLOCK_MS = 1_000
# Under a steady trickle a blocking read returns with the first event, and each event would
# cost a step of four round trips; steps at least this far apart take them in batches
# (`hotMediaUpdated` pushes at most once a second anyway).
STEP_SECONDS = 0.25
# How often days are opened (a new day starts) and closed (a day's top 10 becomes final).
DAY_CHECK_SECONDS = 5.0

def consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


async def ensure_group(services: Services) -> None:
    try:
        # From the start of the stream: events published before the first worker ran still count.
        await services.redis.xgroup_create(engagement_stream(services.keys), GROUP, id="0", mkstream=True)
    except ResponseError as error:
        if "BUSYGROUP" not in str(error):
            raise


async def run(services: Services, stop: asyncio.Event) -> None:
    consumer = consumer_name()
    await ensure_group(services)
    loop = asyncio.get_running_loop()
    next_finalize = 0.0
    while not stop.is_set():
        if loop.time() >= next_finalize:
            await finalize_due_days(services)
            await open_live_days(services)
            next_finalize = loop.time() + DAY_CHECK_SECONDS
        started = loop.time()
        taken = await consume(services, consumer=consumer, block_ms=BLOCK_MS)
        pause = STEP_SECONDS - (loop.time() - started)
        if 0 < taken < BATCH and pause > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause)


async def lag(services: Services) -> list[Lag]:
    """Engagement events the hot scores have not taken in yet."""
    backlog = await group_backlog(services.redis, engagement_stream(services.keys), GROUP)
    return [Lag(NAME, "engagement", entries=backlog.entries, seconds=backlog.oldest_seconds)]


async def open_live_days(services: Services, *, now: datetime | None = None) -> list[date]:
    """Load each live day missing from Redis (a new day, or after Redis lost it) before its events come."""
    now = now or utcnow()
    live = [day for day in kept_days(services.settings, now) if now < live_until(services.settings, day)]
    opened = []
    for day in live:
        if not await services.redis.exists(day_state(services.keys, day)):
            await rebuild_day(services, day, now=now)
            opened.append(day)
    return opened


async def finalize_due_days(services: Services, *, now: datetime | None = None) -> list[date]:
    """Trim every kept day that stopped taking events down to its top 10."""
    now = now or utcnow()
    due = [day for day in kept_days(services.settings, now) if live_until(services.settings, day) <= now]
    return [day for day in due if await finalize_day(services, day)]


async def consume(services: Services, *, consumer: str, block_ms: int | None, claim_idle_ms: int | None = None) -> int:
    """One step: claim a dead consumer's events, else retry our own pending ones, else read new ones."""
    redis, stream = services.redis, engagement_stream(services.keys)
    idle = services.settings.hot_claim_idle_seconds * 1000 if claim_idle_ms is None else claim_idle_ms
    claimed: Any = await redis.xautoclaim(stream, GROUP, consumer, idle, start_id="0-0", count=BATCH)
    # Redis 6.2 answers trimmed entries as empty placeholders; 7 leaves them out.
    messages: list[Any] = [message for message in claimed[1] if message[0] is not None]
    if not messages:
        messages = await _read_group(services, consumer, "0", block_ms=None)
    if not messages:
        messages = await _read_group(services, consumer, ">", block_ms=block_ms)
    if messages:
        await apply(services, messages)
    return len(messages)


async def _read_group(services: Services, consumer: str, start: str, *, block_ms: int | None) -> list[Any]:
    """Our pending events (`0`) or new ones (`>`)."""
    stream = engagement_stream(services.keys)
    reply: Any = await services.redis.xreadgroup(GROUP, consumer, {stream: start}, count=BATCH, block=block_ms)
    return list(reply[0][1]) if reply else []


async def apply(services: Services, messages: list[tuple[bytes, dict[bytes, bytes] | None]]) -> int:
    settings, redis, stream = services.settings, services.redis, engagement_stream(services.keys)
    now = utcnow()
    kept = set(kept_days(settings, now))
    by_day: dict[date, list[tuple[str, EngagementEvent]]] = defaultdict(list)
    dropped: list[bytes] = []
    for message_id, fields in messages:
        if not fields:
            # Trimmed from the stream before anyone applied it: nothing left to apply.
            dropped.append(message_id)
            continue
        try:
            event = EngagementEvent.from_fields(fields)
            day = media_day(event.media_id)
        except (KeyError, ValueError, OverflowError, OSError):
            log.warning("hot: dropping malformed engagement event %r", message_id)
            dropped.append(message_id)
            continue
        # Days no longer live (or never kept) take no events: their top 10 is final.
        if day not in kept or live_until(settings, day) <= now:
            dropped.append(message_id)
        else:
            by_day[day].append((message_id.decode(), event))
    if dropped:
        await redis.xack(stream, GROUP, *dropped)
    if not by_day:
        return 0
    days = list(by_day)
    keys: list[str] = [stream]
    args: list[Any] = [GROUP, len(days)]
    for day in days:
        keys += [day_scores(services.keys, day), day_state(services.keys, day)]
        args.append(int(kept_until(settings, day).timestamp() * 1000))
    for number, day in enumerate(days, start=1):
        for event_id, event in by_day[day]:
            args += [event_id, number, event.media_id, WEIGHTS[event.kind] * event.delta]
    applied, *missing = await APPLY.run(redis, keys, args)
    rebuilt = {days[int(number) - 1] for number in missing}
    for day in rebuilt:
        # Its events stay pending for this consumer and are applied on a later step.
        await rebuild_day(services, day, now=now)
    if applied:
        # Listeners re-read the top themselves: one notice per day however many events.
        for day in set(days) - rebuilt:
            await announce_day(services, day)
    return int(applied)
