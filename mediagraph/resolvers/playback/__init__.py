"""Live playback statistics: heartbeats, and per-stream and per-channel figures.

A player reports every 5 s while playing. The media is the stream and its uploader the
channel. Buckets are UTC minutes, hours and days; a heartbeat counts in them at the time
the player says it played (`at`, bounded by the server clock), and keeps its session
live by the server clock.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum

from sqlalchemy import select
from sqlmodel import col

from mediagraph.context import Context
from mediagraph.dataloaders.playback import (
    REDIS_UNREACHABLE,
    DurableRow,
    Figures,
    PlaybackTotalByEntityLoader,
    merge,
    read_counters,
)
from mediagraph.dataloaders.users import UserByIdLoader
from mediagraph.db.playback import PlaybackBucket
from mediagraph.errors import BadUserInput, Conflict, Forbidden, NotFound, RateLimited, ServiceUnavailable
from mediagraph.keys.playback import (
    RETENTION_SECONDS,
    Counter,
    Entity,
    Granularity,
    bucket_after,
    bucket_at,
    bucket_start,
    live_channel,
    live_key,
    stats_channel,
    to_ms,
)
from mediagraph.keys.playback.scripts import (
    Heartbeat,
    LiveCount,
    PlaybackScripts,
    SessionChurnLimited,
    SessionConflict,
)
from mediagraph.resolvers.media import require_media
from mediagraph.services import Services

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(3000, 1, 1, tzinfo=UTC)
# Buckets one series may span, and how many it spans when `from` is left out.
MAX_BUCKETS = {Granularity.MINUTE: 1440, Granularity.HOUR: 24 * 31, Granularity.DAY: 366}
DEFAULT_BUCKETS = {Granularity.MINUTE: 60, Granularity.HOUR: 24, Granularity.DAY: 30}
CONFLICT_MESSAGE = "This session id is already playing another media; start a new session."


class CountedIn(Enum):
    TOTAL = "total"
    MINUTE = "minute"
    HOUR = "hour"
    DAY = "day"


@dataclass(frozen=True)
class PlaybackReport:
    session_id: uuid.UUID
    media_id: int
    counted_at: datetime
    counted: list[CountedIn]
    concurrent: int


@dataclass(frozen=True)
class BucketFigures:
    start: datetime
    end: datetime
    plays: int
    peak: int
    watch_ms: int
    unique_viewers: int


def _played_at(context: Context, now: datetime, at: datetime | None) -> datetime:
    """When the heartbeat counts: the player's `at`, which must be near the server clock."""
    if at is None:
        return now
    settings = context.settings
    if at.tzinfo is None:
        raise BadUserInput("`at` needs a time zone, e.g. 2026-11-23T10:00:05Z.", argument="at")
    if at > now + timedelta(seconds=settings.playback_max_clock_skew_seconds):
        raise BadUserInput(
            f"`at` is more than {settings.playback_max_clock_skew_seconds} s ahead of the server clock.",
            argument="at",
        )
    if at < now - timedelta(seconds=settings.playback_max_heartbeat_age_seconds):
        raise BadUserInput(
            f"`at` is more than {settings.playback_max_heartbeat_age_seconds} s in the past; "
            "stale heartbeats are not counted.",
            argument="at",
        )
    # A player clock slightly ahead never counts into a bucket the server has not reached.
    return min(at, now)


async def report_playback(
    context: Context, *, session_id: uuid.UUID, media_id: int, at: datetime | None
) -> PlaybackReport:
    if session_id.int == 0:
        raise BadUserInput("`sessionId` must be a random UUID, not the nil UUID.", argument="sessionId")
    now = context.services.clock()
    played_at = _played_at(context, now, at)
    try:
        return await _count(context, session_id=session_id, media_id=media_id, played_at=played_at, now=now)
    except REDIS_UNREACHABLE:
        # Nothing or everything was counted; a retry of the same heartbeat counts nothing twice.
        raise ServiceUnavailable("Playback reporting is unavailable right now; retry shortly.") from None


# Sessions this process saw bound to their media, by (key prefix, session id): (media, channel).
# A heartbeat of one of them needs no claim round trip of its own; the claim is renewed (and
# checked) in the heartbeat's. Bounded; a session forgotten here only costs that round trip.
BOUND_SESSIONS_MAX = 100_000
_bound: OrderedDict[tuple[str, str], tuple[int, int]] = OrderedDict()


def _remember(prefix: str, session: str, binding: tuple[int, int]) -> None:
    key = (prefix, session)
    _bound[key] = binding
    _bound.move_to_end(key)
    if len(_bound) > BOUND_SESSIONS_MAX:
        _bound.popitem(last=False)


async def _count(
    context: Context, *, session_id: uuid.UUID, media_id: int, played_at: datetime, now: datetime
) -> PlaybackReport:
    services = context.services
    settings = context.settings
    session = str(session_id)
    scripts = PlaybackScripts(services.redis, services.keys)
    session_ttl = settings.playback_session_idle_hours * 3600
    prefix = services.keys.prefix
    known = _bound.get((prefix, session))
    seen = known is not None and known[0] == media_id
    in_script = scripts.claims_in_script
    renew_claim = seen and not in_script
    claimed_now = False
    try:
        if known is not None and seen:
            channel_id = known[1]
        elif in_script:
            # A session new to this process: its media must exist, and its uploader is the
            # channel; the heartbeat's script claims the session before it counts anything.
            channel_id = (await require_media(context, media_id)).owner_id
        else:
            # A session new to this process: its media must exist, and its uploader is the
            # channel; the claim binds the session (or finds it bound) with that channel.
            media = await require_media(context, media_id)
            channel_id, claimed_now = await scripts.claim(session, media_id, session_ttl, channel_id=media.owner_id)
    except SessionConflict:
        raise Conflict(CONFLICT_MESSAGE, argument="sessionId") from None
    stream = Entity.stream(media_id, channel_id)
    now_ms = to_ms(now)
    beat = Heartbeat(
        session_id=session,
        stream=stream,
        address=context.client_address,
        played_ms=now_ms if played_at is now else to_ms(played_at),
        now_ms=now_ms,
        generation=services.ids.next_id(),
        viewer_id=context.viewer_id,
    )
    try:
        result = await scripts.heartbeat(
            beat,
            live_window_ms=settings.playback_live_window_seconds * 1000,
            session_ttl_seconds=session_ttl,
            churn_limit=settings.playback_new_sessions_per_minute,
            renew_claim=renew_claim,
            claim=in_script,
            # A session this process has counted for this media only grows what the roll-up copies.
            maybe_new=not seen,
            growth_delay_ms=round(settings.playback_rollup_delay_seconds * 1000),
        )
    except SessionConflict:
        _bound.pop((prefix, session), None)
        raise Conflict(CONFLICT_MESSAGE, argument="sessionId") from None
    except SessionChurnLimited as limited:
        if claimed_now:
            # A refused session keeps nothing in Redis, so churn cannot fill it with claims.
            await scripts.release(session)
        raise RateLimited("Too many new playback sessions; try again later.", retry_after=limited.retry_after) from None
    _remember(prefix, session, (media_id, channel_id))
    # A session counts in the stream's figures and its channel's together.
    counted = any(result.counted)
    if not result.published:
        await asyncio.gather(
            _publish(services, stream, result.stream, counted=counted),
            _publish(services, Entity.of_channel(stream.channel), result.channel, counted=counted),
        )
    kinds = (CountedIn.TOTAL, CountedIn.MINUTE, CountedIn.HOUR, CountedIn.DAY)
    return PlaybackReport(
        session_id=session_id,
        media_id=media_id,
        counted_at=played_at,
        counted=[kind for kind, counted in zip(kinds, result.counted, strict=True) if counted],
        concurrent=result.stream.viewers,
    )


async def _publish(services: Services, entity: Entity, live: LiveCount, *, counted: bool) -> None:
    if live.changed:
        await services.bus.publish(
            live_channel(services.keys, entity), {"viewers": live.viewers, "version": live.version}
        )
    if counted:
        await services.bus.publish(stats_channel(services.keys, entity), {"counted": True})


async def stream_of(context: Context, media_id: int) -> Entity:
    media = await require_media(context, media_id)
    return Entity.stream(media.id, media.owner_id)


async def channel_of(context: Context, user_id: int) -> Entity:
    if await context.loader(UserByIdLoader).load(user_id) is None:
        raise NotFound("No such user.")
    return Entity.of_channel(user_id)


async def total(context: Context, entity: Entity) -> int:
    return (await context.loader(PlaybackTotalByEntityLoader).load(entity)).plays


def require_owner(context: Context, entity: Entity) -> None:
    """Watch time, view duration, distinct viewers and plays are the channel owner's alone."""
    if context.viewer_id != entity.channel:
        raise Forbidden("Only the channel's owner sees watch time, view duration, viewers and plays.")


def average_seconds(watch_ms: int, plays: int) -> float:
    return watch_ms / 1000 / plays if plays else 0.0


async def watch_totals(context: Context, entity: Entity) -> Figures:
    """All-time plays and watch time, for the owner."""
    require_owner(context, entity)
    return await context.loader(PlaybackTotalByEntityLoader).load(entity)


async def concurrent(context: Context, entity: Entity) -> int:
    services = context.services
    since = to_ms(services.clock()) - context.settings.playback_live_window_seconds * 1000
    try:
        return int(await services.redis.zcount(live_key(services.keys, entity), since, "+inf"))
    except REDIS_UNREACHABLE:
        raise ServiceUnavailable("Live viewer counts are unavailable right now.") from None


def check_time_range(start: datetime | None, end: datetime | None, *, names: tuple[str, str]) -> None:
    """Either bound may be absent; given ones carry a time zone, lie in [1970, 3000), and in order."""
    for name, moment in zip(names, (start, end), strict=True):
        if moment is None:
            continue
        if moment.tzinfo is None:
            raise BadUserInput(f"`{name}` needs a time zone, e.g. 2026-11-23T10:00:00Z.", argument=name)
        if not EARLIEST <= moment < LATEST:
            raise BadUserInput(f"`{name}` must be between 1970 and 3000.", argument=name)
    if start is not None and end is not None and end <= start:
        raise BadUserInput(f"`{names[0]}` must be before `{names[1]}`.", argument=names[0])


def _bucket_range(
    context: Context, granularity: Granularity, start: datetime | None, end: datetime | None
) -> tuple[int, int]:
    """First and past-the-last bucket index covering [start, end)."""
    check_time_range(start, end, names=("from", "to"))
    # `to` defaults to the end of the current bucket, `from` to a few buckets before it.
    current = bucket_at(context.services.clock(), granularity)
    last = bucket_after(end, granularity) if end is not None else current + 1
    first = bucket_at(start, granularity) if start is not None else last - DEFAULT_BUCKETS[granularity]
    if first >= last:
        raise BadUserInput("`from` must be before `to`.", argument="from")
    if last - first > MAX_BUCKETS[granularity]:
        raise BadUserInput(
            f"A {granularity.value} series spans at most {MAX_BUCKETS[granularity]} buckets; narrow `from`..`to`.",
            argument="from",
        )
    return first, last


async def series(
    context: Context, entity: Entity, *, granularity: Granularity, start: datetime | None, end: datetime | None
) -> list[BucketFigures]:
    """Every bucket from `start` to `end`, empty ones as zero."""
    first, last = _bucket_range(context, granularity, start, end)
    services = context.services
    async with context.db.use() as session:
        rows = await session.execute(
            select(
                col(PlaybackBucket.bucket_start),
                col(PlaybackBucket.generation),
                col(PlaybackBucket.plays),
                col(PlaybackBucket.peak),
                col(PlaybackBucket.watch_ms),
                col(PlaybackBucket.unique_viewers),
            ).where(
                col(PlaybackBucket.entity_kind) == entity.kind.value,
                col(PlaybackBucket.entity_id) == entity.id,
                col(PlaybackBucket.granularity) == granularity.value,
                col(PlaybackBucket.bucket_start) >= bucket_start(first, granularity),
                col(PlaybackBucket.bucket_start) < bucket_start(last, granularity),
            )
        )
        durable: dict[datetime, list[DurableRow]] = {}
        for started, generation, plays, peak, watch_ms, unique_viewers in rows:
            durable.setdefault(started, []).append((generation, plays, peak, watch_ms, unique_viewers))
    # Redis only holds buckets younger than their retention, and none ahead of the clock
    # (give or take another process's clock).
    now = services.clock()
    held_from = bucket_at(now - timedelta(seconds=RETENTION_SECONDS[granularity]), granularity)
    held_to = bucket_at(now, granularity) + 2
    held = [Counter(entity, granularity, index) for index in range(max(first, held_from), min(last, held_to))]
    live = {value.counter.index: value for value in await read_counters(services, held) if value is not None}
    figures: list[BucketFigures] = []
    for index in range(first, last):
        started = bucket_start(index, granularity)
        merged: Figures = merge(durable.get(started, []), live.get(index))
        figures.append(
            BucketFigures(
                started,
                bucket_start(index + 1, granularity),
                merged.plays,
                merged.peak,
                merged.watch_ms,
                merged.unique_viewers,
            )
        )
    return figures


async def current_minute(context: Context, entity: Entity) -> BucketFigures:
    """The UTC minute running now, as `series` reports it."""
    index = bucket_at(context.services.clock(), Granularity.MINUTE)
    start, end = bucket_start(index, Granularity.MINUTE), bucket_start(index + 1, Granularity.MINUTE)
    [figures] = await series(context, entity, granularity=Granularity.MINUTE, start=start, end=end)
    return figures
