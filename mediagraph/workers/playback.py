"""Playback roll-up and live-count sweep.

Roll-up: channels with changed counters wait in one of two indexes. A heartbeat that may
have started a play names its channel due at once (a play is listed once copied); one that
only grew what PostgreSQL holds names it as growth, due `playback_rollup_delay_seconds`
later (reads take the growth from Redis meanwhile), so a busy channel's counters are
copied once per delay rather than at every heartbeat. Each visit copies the current values
of the channel's dirty counters into PostgreSQL (absolute values, GREATEST, so a visit
repeated after a crash, or two workers visiting at once, change nothing), then forgets
the counters that did not change meanwhile. A visited channel leaves the due index unless
named again since it was read; what heartbeats left during the visit waits as growth; a
channel leaves the growth index only when nothing of it is dirty, and is named due at once
if a heartbeat dirtied it in between.

Plays: the same visit copies the channel's dirty plays (session records) into `plays`,
one statement per batch, making the day partitions they need; now and then the worker
makes the coming days' partitions and drops those past `play_history_days`.

Sweep: sessions expire without anyone sending anything, so once a second the worker
drops expired sessions of every entity a live subscription watches and publishes the
counts that fell.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import date, datetime, timedelta
from operator import itemgetter
from typing import cast

from mediagraph.db.base import utcnow
from mediagraph.db.playback import (
    BucketRow,
    TotalRow,
    create_partition,
    drop_partition,
    partition_days,
    upsert_counters,
    upsert_plays,
)
from mediagraph.keys.playback import (
    EPOCH,
    Granularity,
    bucket_start,
    channel_of_dirty_key,
    dirty_index_key,
    dirty_key,
    dirty_pattern,
    entity_of_watched,
    grown_index_key,
    live_channel,
    to_ms,
    token_parts,
    watched_key,
)
from mediagraph.keys.playback.scripts import (
    PLAY_TOKEN_PREFIX,
    CounterValue,
    PlaybackScripts,
    PlayValue,
    RawCounter,
    play_of,
)
from mediagraph.observability.metrics import Lag
from mediagraph.services import Services

NAME = "playback"

log = logging.getLogger(__name__)

CHANNELS_PER_VISIT = 200
ROWS_PER_STATEMENT = 1000
COUNTERS_PER_SCRIPT = 1000
SWEEP_INTERVAL_SECONDS = 1.0
SWEEP_BATCH = 500
# A worker killed between taking a channel off the index and checking it again could
# strand dirty counters; a scan for such channels runs at start and now and then.
REPAIR_INTERVAL_SECONDS = 600.0
PARTITION_INTERVAL_SECONDS = 3600.0
# Day partitions of `plays` made ahead of the clock (today included).
PARTITION_DAYS_AHEAD = 3


async def roll_up_once(services: Services, *, channels: int = CHANNELS_PER_VISIT, everything: bool = False) -> int:
    """Visit up to `channels` dirty channels whose visit is due (with `everything`, due or
    not), soonest due first; returns how many were visited."""
    redis, keys = services.redis, services.keys
    now_ms = to_ms(services.clock())
    async with redis.pipeline(transaction=False) as pipe:
        pipe.zrange(dirty_index_key(keys), 0, channels - 1, withscores=True)
        pipe.zrangebyscore(grown_index_key(keys), "-inf", "+inf" if everything else now_ms, start=0, num=channels)
        due, grown = await pipe.execute()
    named = {int(member): float(score) for member, score in due}
    visiting = list(dict.fromkeys([*named, *(int(member) for member in grown)]))[:channels]
    if not visiting:
        return 0
    async with redis.pipeline(transaction=False) as pipe:
        for channel_id in visiting:
            pipe.smembers(dirty_key(keys, channel_id))
        tokens = await pipe.execute()
    # Counters go by token (the dirty set's member) until their values are stored.
    dirty: dict[int, list[str]] = {}
    dirty_plays: dict[int, list[str]] = {}
    for channel_id, channel_tokens in zip(visiting, tokens, strict=True):
        names = sorted(token.decode() for token in channel_tokens)
        dirty_plays[channel_id] = [
            name[len(PLAY_TOKEN_PREFIX) :] for name in names if name.startswith(PLAY_TOKEN_PREFIX)
        ]
        dirty[channel_id] = [name for name in names if not name.startswith(PLAY_TOKEN_PREFIX)]
    scripts = PlaybackScripts(redis, keys)
    # Every channel's copies read in one round trip, and later every channel's forgetting in
    # one: a visit carries up to `channels` channels, and a round trip (or a reply) per
    # channel or per counter cost more than the rest of the visit.
    with_plays = {channel_id: sessions for channel_id, sessions in dirty_plays.items() if sessions}
    raw, read_plays = await scripts.read_copies(dirty, with_plays, per_script=COUNTERS_PER_SCRIPT)
    copied: dict[int, list[tuple[str, RawCounter]]] = {
        channel_id: list(zip(channel_tokens, raw.get(channel_id, ()), strict=True))
        for channel_id, channel_tokens in dirty.items()
    }
    raw_plays = {
        channel_id: list(zip(with_plays[channel_id], read, strict=True)) for channel_id, read in read_plays.items()
    }
    await store_rows(*counter_rows(copied, utcnow()), services)
    await store_plays(
        [
            play
            for channel_id, read in raw_plays.items()
            for session, raw_play in read
            if (play := play_of(channel_id, session, raw_play)) is not None
        ],
        services,
    )
    remaining = await scripts.forget_all_copied(copied, raw_plays, per_script=COUNTERS_PER_SCRIPT)
    await scripts.leave_due({channel_id: named[channel_id] for channel_id in visiting if channel_id in named})
    await _leave_index(services, remaining, now_ms)
    return len(visiting)


async def lag(services: Services) -> list[Lag]:
    """Channels due to be rolled up into PostgreSQL, and how long the first of them has been due
    (a channel whose heartbeats only grew what PostgreSQL holds is not due until its delay passed)."""
    now_ms = to_ms(services.clock())
    async with services.redis.pipeline(transaction=False) as pipe:
        pipe.zcard(dirty_index_key(services.keys))
        pipe.zrange(dirty_index_key(services.keys), 0, 0, withscores=True)
        pipe.zcount(grown_index_key(services.keys), "-inf", now_ms)
        pipe.zrange(grown_index_key(services.keys), 0, 0, withscores=True)
        named, first_named, grown, first_grown = await pipe.execute()
    since = [float(score) for first in (first_named, first_grown) for _, score in first if float(score) <= now_ms]
    seconds = max(0.0, (now_ms - min(since)) / 1000) if since else 0.0
    return [Lag(NAME, "rollup", entries=int(named) + int(grown), seconds=seconds)]


def _moment(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def _today(services: Services) -> date:
    return services.clock().date()


def _oldest_kept_day(services: Services) -> date:
    return _today(services) - timedelta(days=services.settings.play_history_days)


async def store_plays(plays: Sequence[PlayValue], services: Services) -> None:
    """Write plays into `plays` in batches of one statement each; never lowers what is there.
    Plays that started before the kept history are left out (their partition is gone)."""
    oldest = _oldest_kept_day(services)
    rows = [
        (
            _moment(play.started_ms),
            uuid.UUID(play.session_id),
            play.media_id,
            play.channel_id,
            play.viewer_id,
            _moment(play.last_ms),
            play.watch_ms,
        )
        for play in plays
        if _moment(play.started_ms).date() >= oldest
    ]
    if not rows:
        return
    reads = services.databases.main_reads
    have = set(await partition_days(reads))
    for day in sorted({row[0].date() for row in rows} - have):
        await create_partition(reads, day)
    for start in range(0, len(rows), ROWS_PER_STATEMENT):
        await upsert_plays(reads, rows[start : start + ROWS_PER_STATEMENT])


async def maintain_partitions(services: Services) -> tuple[list[date], list[date]]:
    """Make the coming days' partitions of `plays` and drop the expired; (made, dropped)."""
    reads = services.databases.main_reads
    have = set(await partition_days(reads))
    today, oldest = _today(services), _oldest_kept_day(services)
    made = [day for n in range(PARTITION_DAYS_AHEAD) if (day := today + timedelta(days=n)) not in have]
    for day in made:
        await create_partition(reads, day)
    dropped = sorted(day for day in have if day < oldest)
    for day in dropped:
        await drop_partition(reads, day)
    return made, dropped


async def _leave_index(services: Services, remaining: Mapping[int, int], now_ms: int) -> None:
    """Visited channels leave the index of growth, or wait its delay again with what
    heartbeats left during the visit (a new play among it named them due at once)."""
    redis, keys = services.redis, services.keys
    grown = grown_index_key(keys)
    due_ms = now_ms + round(services.settings.playback_rollup_delay_seconds * 1000)
    clean = [str(channel_id) for channel_id, left in remaining.items() if left == 0]
    waiting = {str(channel_id): due_ms for channel_id, left in remaining.items() if left}
    async with redis.pipeline(transaction=False) as pipe:
        if clean:
            pipe.zrem(grown, *clean)
        if waiting:
            pipe.zadd(grown, waiting)
        await pipe.execute()
    if not clean:
        return
    # A heartbeat may have dirtied a channel after it was checked clean; its own index
    # entry could have landed before the removal above. (Every removal is done before
    # any check: on a cluster the index and the dirty sets live on different nodes.)
    async with redis.pipeline(transaction=False) as pipe:
        for channel_id in clean:
            pipe.scard(dirty_key(keys, int(channel_id)))
        sizes = await pipe.execute()
    # What dirtied it may be a new play: due at once.
    dirtied = {channel_id: now_ms for channel_id, size in zip(clean, sizes, strict=True) if size}
    if dirtied:
        await redis.zadd(dirty_index_key(keys), dirtied, gt=True)


def counter_rows(
    copied: Mapping[int, Sequence[tuple[str, Sequence[bytes | int | None]]]], now: datetime
) -> tuple[list[TotalRow], list[BucketRow]]:
    """The rows to store for counters by channel, each as its token and its figures (a
    `RawCounter` as read, or the same as numbers); a counter Redis no longer holds has none.

    Straight from token and figures to row, with no objects on the way: a busy visit
    carries tens of thousands of counters, and building a Counter, an Entity and a
    CounterValue for each cost more than the statement that stores them."""
    totals: list[TotalRow] = []
    buckets: list[BucketRow] = []
    # A visit's buckets share a few starts (this minute, hour and day): each is made once.
    starts: dict[tuple[Granularity, int], datetime] = {}
    for channel_id, channel_copied in copied.items():
        for token, (generation, plays, peak, watch_ms, unique_viewers) in channel_copied:
            if generation is None:
                continue
            kind, entity_id, granularity, index = token_parts(channel_id, token)
            if granularity is None:
                totals.append((kind.value, entity_id, int(generation), int(plays or 0), int(watch_ms or 0), now))
                continue
            start = starts.get((granularity, index))
            if start is None:
                start = starts[granularity, index] = bucket_start(index, granularity)
            buckets.append(
                (
                    kind.value,
                    entity_id,
                    granularity.value,
                    start,
                    int(generation),
                    int(plays or 0),
                    int(peak or 0),
                    int(watch_ms or 0),
                    int(unique_viewers or 0),
                    now,
                )
            )
    return totals, buckets


async def store(values: Sequence[CounterValue], services: Services) -> None:
    """Write counter values into PostgreSQL; never lowers what is there."""
    by_channel: dict[int, list[tuple[str, Sequence[int]]]] = {}
    for value in values:
        raw = (value.generation, value.plays, value.peak, value.watch_ms, value.unique_viewers)
        by_channel.setdefault(value.counter.entity.channel, []).append((value.counter.token, raw))
    await store_rows(*counter_rows(by_channel, utcnow()), services)


async def store_rows(totals: list[TotalRow], buckets: list[BucketRow], services: Services) -> None:
    """Write counter rows into PostgreSQL; never lowers what is there. One prepared statement
    per kind of counter, its rows as arrays: a heartbeat dirties eight counters, so a busy
    roll-up carries thousands, which ORM statement building would spend its time on."""
    if not totals and not buckets:
        return
    # Keys in one order for every writer, so concurrent roll-ups wait instead of deadlocking.
    totals.sort(key=itemgetter(0, 1, 2))
    buckets.sort(key=itemgetter(0, 1, 2, 3, 4))
    reads = services.databases.main_reads
    for first in range(0, max(len(totals), len(buckets)), ROWS_PER_STATEMENT):
        end = first + ROWS_PER_STATEMENT
        await upsert_counters(reads, totals[first:end], buckets[first:end])


async def sweep_once(services: Services) -> int:
    """Publish the live counts that fell since the last sweep; returns how many entities were swept."""
    redis, keys, settings = services.redis, services.keys, services.settings
    now_ms = to_ms(services.clock())
    watched = watched_key(keys)
    await redis.zremrangebyscore(watched, "-inf", f"({now_ms}")
    members = cast(list[bytes], await redis.zrange(watched, 0, -1))
    entities = [entity_of_watched(member.decode()) for member in members]
    scripts = PlaybackScripts(redis, keys)
    for start in range(0, len(entities), SWEEP_BATCH):
        batch = entities[start : start + SWEEP_BATCH]
        counts = await scripts.sweep(batch, now_ms=now_ms, live_window_ms=settings.playback_live_window_seconds * 1000)
        for entity, count in zip(batch, counts, strict=True):
            if count is not None:
                await services.bus.publish(
                    live_channel(keys, entity), {"viewers": count.viewers, "version": count.version}
                )
    return len(entities)


async def repair_index(services: Services) -> int:
    """Put back on the index every channel with dirty counters; returns how many were missing."""
    redis, keys = services.redis, services.keys
    index = dirty_index_key(keys)
    repaired = 0
    async for key in redis.scan_iter(match=dirty_pattern(keys), count=1000):
        channel_id = channel_of_dirty_key(keys, key.decode())
        if await redis.scard(key) and await redis.zadd(index, {str(channel_id): to_ms(services.clock())}, nx=True):
            repaired += 1
    return repaired


async def run(services: Services, stop: asyncio.Event) -> None:
    """Roll up, sweep and repair on their own schedules; a failing step (PostgreSQL or
    Redis away) is logged and retried on the next beat without stopping the others."""
    repair_due = True

    async def roll_up() -> None:
        nonlocal repair_due
        try:
            if repair_due:
                if await repair_index(services):
                    log.warning("the playback roll-up index was missing channels; restored")
                repair_due = False
            while await roll_up_once(services) == CHANNELS_PER_VISIT:
                pass
        except BaseException:
            # A visit cut short may have taken a dirty channel off the index.
            repair_due = True
            raise

    async def schedule_repair() -> None:
        nonlocal repair_due
        repair_due = True

    async def sweep() -> None:
        await sweep_once(services)

    async def partitions() -> None:
        await maintain_partitions(services)

    await asyncio.gather(
        _every(stop, services.settings.playback_rollup_interval_seconds, roll_up),
        _every(stop, SWEEP_INTERVAL_SECONDS, sweep),
        _every(stop, REPAIR_INTERVAL_SECONDS, schedule_repair),
        _every(stop, PARTITION_INTERVAL_SECONDS, partitions),
    )


async def _every(stop: asyncio.Event, seconds: float, step: Callable[[], Awaitable[None]]) -> None:
    while not stop.is_set():
        try:
            await step()
        except Exception:
            log.exception("playback worker step failed; retrying")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)
