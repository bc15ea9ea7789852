from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis
from sqlalchemy import select
from sqlmodel import col

from mediagraph.db.playback import PlaybackBucket, PlaybackTotal
from mediagraph.ids import decode_id
from mediagraph.keys.playback import Counter, Entity, Granularity, bucket_index, dirty_index_key, domain_pattern, to_ms
from mediagraph.keys.playback.scripts import CounterValue, PlaybackScripts
from mediagraph.workers import playback as worker
from tests.support.playback import (
    REPORT,
    STREAM_STATS,
    ReferenceModel,
    channel_stats,
    counts,
    make_channel,
    new_session,
    peaks,
    report,
    stream_stats,
)
from tests.support.servers import free_port

GRANULARITIES = ("MINUTE", "HOUR", "DAY")
MARGIN = {"MINUTE": timedelta(minutes=1), "HOUR": timedelta(hours=1), "DAY": timedelta(days=1)}


async def forget_redis(services) -> None:
    """Redis loses everything of the domain (this run's prefix only)."""
    async for key in services.redis.scan_iter(match=domain_pattern(services.keys), count=1000):
        await services.redis.delete(key)


async def roll_up_everything(services) -> None:
    for _ in range(100):
        if await worker.roll_up_once(services, everything=True) == 0:
            return
    raise AssertionError("the roll-up never ran out of dirty channels")


async def figures(gql, channel, first, last):
    """Every figure the API shows for the channel and its streams around [first, last]."""
    seen = {}
    for granularity in GRANULARITIES:
        start, end = first - MARGIN[granularity], last + MARGIN[granularity]
        for media in channel.media:
            stats = await stream_stats(gql, media["id"], granularity, start, end)
            seen[(media["id"], granularity)] = (stats["total"], counts(stats["series"]), peaks(stats["series"]))
        stats = await channel_stats(gql, channel.user["id"], granularity, start, end)
        seen[("channel", granularity)] = (stats["total"], counts(stats["series"]), peaks(stats["series"]))
    return seen


async def watch(gql, clock, channel, model, *, start, seconds, sessions, step=5):
    """Each session heartbeats every `step` s on the channel's streams, in turn."""
    for offset in range(0, seconds, step):
        for n, session in enumerate(sessions):
            stream = n % len(channel.media)
            clock.set(start + timedelta(seconds=offset, milliseconds=n))
            await report(gql, session, channel.media[stream]["id"])
            model.heartbeat(session, entities=[f"s{stream}", "channel"], at=clock.now)


async def watched_channel(gql, http, clock, *, start, seconds):
    """A channel of two streams that three sessions watched for `seconds` from `start`:
    the channel, the reference model, and its figures before any roll-up."""
    channel = await make_channel(gql, http, media=2)
    model = ReferenceModel()
    await watch(gql, clock, channel, model, start=start, seconds=seconds, sessions=[new_session() for _ in range(3)])
    return channel, model, await figures(gql, channel, start, clock.now)


async def test_rolled_up_figures_survive_redis_forgetting_everything(gql, http, clock, services):
    start = datetime(2031, 5, 1, 23, 59, 30, tzinfo=UTC)
    channel, model, before = await watched_channel(gql, http, clock, start=start, seconds=60)

    await roll_up_everything(services)
    await forget_redis(services)

    assert await figures(gql, channel, start, clock.now) == before
    window = (start - timedelta(days=1), clock.now + timedelta(days=1))
    days = await channel_stats(gql, channel.user["id"], "DAY", *window)
    assert counts(days["series"]) == model.series("channel", "DAY", *window)
    assert days["total"] == model.total("channel") == 3
    async with services.databases.main_session() as session:
        stream_id = decode_id(channel.media[0]["id"], "Media")
        rows = (
            await session.execute(
                select(PlaybackBucket).where(
                    col(PlaybackBucket.entity_id) == stream_id, col(PlaybackBucket.granularity) == "day"
                )
            )
        ).scalars()
        assert sorted((row.bucket_start.day, row.plays, row.peak) for row in rows) == [(1, 2, 2), (2, 2, 2)]


async def test_a_roll_up_after_redis_lost_its_scripts_copies_everything(gql, http, clock, services):
    start = datetime(2031, 5, 1, 12, 0, 0, tzinfo=UTC)
    channel, _, before = await watched_channel(gql, http, clock, start=start, seconds=30)
    # As after a Redis restart: the roll-up's scripts are loaded again mid-visit.
    await services.redis.script_flush()

    await roll_up_everything(services)
    await forget_redis(services)

    assert await figures(gql, channel, start, clock.now) == before


async def test_counting_after_redis_forgets_adds_to_what_postgres_holds(gql, http, clock, services):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    clock.set(datetime(2031, 5, 2, 10, 0, 5, tzinfo=UTC))
    for _ in range(2):
        await report(gql, new_session(), media_id)
    await roll_up_everything(services)
    await forget_redis(services)

    clock.advance(5)
    late_joiner = await report(gql, new_session(), media_id)
    assert late_joiner["concurrent"] == 1, "live sessions are Redis state and went with it"
    stats = await stream_stats(gql, media_id, "MINUTE", clock.now, clock.now + timedelta(seconds=1))
    assert (stats["total"], counts(stats["series"])[0][1]) == (3, 3), "PostgreSQL's generation plus Redis's new one"

    await roll_up_everything(services)
    async with services.databases.main_session() as session:
        rows = (
            await session.execute(
                select(PlaybackTotal).where(col(PlaybackTotal.entity_id) == decode_id(media_id, "Media"))
            )
        ).scalars()
        assert sorted(row.plays for row in rows) == [1, 2], "one row per Redis generation"
    await forget_redis(services)
    stats = await stream_stats(gql, media_id, "MINUTE", clock.now, clock.now + timedelta(seconds=1))
    assert (stats["total"], counts(stats["series"])[0][1]) == (3, 3)


async def test_a_roll_up_that_dies_midway_or_runs_twice_counts_nothing_twice(gql, http, clock, services, monkeypatch):
    monkeypatch.setattr(worker, "COUNTERS_PER_SCRIPT", 3)  # a channel's counters forgotten in several steps
    channel = await make_channel(gql, http, media=2)
    model = ReferenceModel()
    start = datetime(2031, 5, 3, 12, 59, 40, tzinfo=UTC)
    sessions = [new_session() for _ in range(4)]
    await watch(gql, clock, channel, model, start=start, seconds=30, sessions=sessions)

    forget_all_copied = PlaybackScripts.forget_all_copied

    async def crash(self, counters, plays, *, per_script):
        # Killed after writing PostgreSQL, with the first few counters forgotten and the rest not.
        first = next(iter(counters))
        await forget_all_copied(self, {first: counters[first][:per_script]}, {}, per_script=per_script)
        raise ConnectionError("worker killed after writing PostgreSQL")

    with monkeypatch.context() as patched:
        patched.setattr(PlaybackScripts, "forget_all_copied", crash)
        with pytest.raises(ConnectionError):
            await worker.roll_up_once(services)
    await watch(gql, clock, channel, model, start=start + timedelta(seconds=30), sessions=sessions, seconds=40)
    await asyncio.gather(worker.roll_up_once(services), worker.roll_up_once(services))
    await roll_up_everything(services)
    await worker.roll_up_once(services)
    await forget_redis(services)

    for granularity in GRANULARITIES:
        window = (start - MARGIN[granularity], clock.now + MARGIN[granularity])
        for n, media in enumerate(channel.media):
            stats = await stream_stats(gql, media["id"], granularity, *window)
            assert counts(stats["series"]) == model.series(f"s{n}", granularity, *window), granularity
            assert stats["total"] == model.total(f"s{n}") == 2
        stats = await channel_stats(gql, channel.user["id"], granularity, *window)
        assert counts(stats["series"]) == model.series("channel", granularity, *window), granularity


async def durable_total(services, stream_id: int) -> tuple[int, int]:
    """(plays, watched ms) PostgreSQL holds for a stream's all-time total."""
    async with services.databases.main_session() as session:
        rows = (
            await session.execute(
                select(PlaybackTotal).where(
                    col(PlaybackTotal.entity_kind) == "stream", col(PlaybackTotal.entity_id) == stream_id
                )
            )
        ).scalars()
        found = list(rows)
    return sum(row.plays for row in found), sum(row.watch_ms for row in found)


async def test_a_new_play_is_copied_at_once_and_mere_growth_after_its_delay(gql, http, clock, services):
    delay = services.settings.playback_rollup_delay_seconds
    assert delay > 10
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    stream_id = decode_id(media_id, "Media")
    session = new_session()
    await report(gql, session, media_id)
    assert await worker.roll_up_once(services) == 1
    assert await durable_total(services, stream_id) == (1, 0)

    # A later heartbeat of the same play grows its watched time: not due yet, and not a backlog.
    clock.advance(5)
    await report(gql, session, media_id)
    assert await worker.roll_up_once(services) == 0
    assert await durable_total(services, stream_id) == (1, 0)
    assert [(lag.entries, lag.seconds) for lag in await worker.lag(services)] == [(0, 0.0)]

    # A new play on the same channel makes it due at once, and its visit copies the growth too.
    await report(gql, new_session(), media_id)
    assert await worker.roll_up_once(services) == 1
    assert await durable_total(services, stream_id) == (2, 5000)

    # Growth alone is copied once its delay has passed.
    clock.advance(5)
    await report(gql, session, media_id)
    assert await worker.roll_up_once(services) == 0
    clock.advance(delay)
    assert [lag.entries for lag in await worker.lag(services)] == [1]
    assert await worker.roll_up_once(services) == 1
    assert await durable_total(services, stream_id) == (2, 10000)
    # Meanwhile reads took it from Redis: the API's figures never waited for the copy.
    assert (await stream_stats(gql, media_id, "MINUTE", clock.now - timedelta(minutes=3), clock.now))["total"] == 2


async def test_a_play_found_new_after_all_is_due_at_once(gql, http, clock, services):
    """A session this process counted before, gone from Redis (expired idle, or Redis lost it),
    starts a new play: its channel is due at once, though the process took it for growth."""
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    session = new_session()
    await report(gql, session, media_id)
    await roll_up_everything(services)
    await forget_redis(services)
    clock.advance(5)
    await report(gql, session, media_id)
    assert await worker.roll_up_once(services) == 1
    assert await durable_total(services, decode_id(media_id, "Media")) == (2, 0)


@pytest.mark.parametrize("arrives", ["growth", "new play"])
async def test_what_arrives_during_a_visit_waits_as_it_would_have(gql, http, clock, services, monkeypatch, arrives):
    """Growth left while a visit copies waits its delay; a play started meanwhile is due at once."""
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    session = new_session()
    await report(gql, session, media_id)
    real_store = worker.store_rows
    arrived = []

    async def store_while_heartbeating(*args, **kwargs):
        if not arrived:
            clock.advance(5)
            arrived.append(await report(gql, session if arrives == "growth" else new_session(), media_id))
        await real_store(*args, **kwargs)

    monkeypatch.setattr(worker, "store_rows", store_while_heartbeating)
    assert await worker.roll_up_once(services) == 1
    assert arrived
    assert await worker.roll_up_once(services) == (0 if arrives == "growth" else 1)
    clock.advance(services.settings.playback_rollup_delay_seconds)
    await roll_up_everything(services)
    assert await durable_total(services, decode_id(media_id, "Media")) == ((1, 5000) if arrives == "growth" else (2, 0))


async def test_an_older_copy_never_lowers_what_postgres_holds(gql, http, services):
    channel = await make_channel(gql, http)
    stream = Entity.stream(decode_id(channel.media[0]["id"], "Media"), decode_id(channel.user["id"], "User"))
    minute = Counter(
        stream, Granularity.MINUTE, bucket_index(to_ms(datetime(2031, 5, 4, tzinfo=UTC)), Granularity.MINUTE)
    )
    newer = [CounterValue(Counter(stream), 77, plays=9, peak=0), CounterValue(minute, 77, plays=5, peak=4)]
    older = [CounterValue(Counter(stream), 77, plays=6, peak=0), CounterValue(minute, 77, plays=3, peak=2)]
    await worker.store(newer, services)
    await worker.store(older, services)
    stats = await stream_stats(
        gql, channel.media[0]["id"], "MINUTE", datetime(2031, 5, 4, tzinfo=UTC), datetime(2031, 5, 4, 0, 1, tzinfo=UTC)
    )
    assert stats["total"] == 9
    assert stats["series"][0]["count"] == 5
    assert stats["series"][0]["peak"] == 4


async def test_a_channel_stranded_off_the_roll_up_index_is_found_again(gql, http, clock, services):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    clock.set(datetime(2031, 5, 5, 8, 0, tzinfo=UTC))
    await report(gql, new_session(), media_id)
    await services.redis.zrem(dirty_index_key(services.keys), str(decode_id(channel.user["id"], "User")))
    await roll_up_everything(services)
    await forget_redis(services)
    assert (await stream_stats(gql, media_id))["total"] == 0, "nothing reached PostgreSQL"

    clock.set(datetime(2031, 5, 5, 8, 0, tzinfo=UTC))
    await report(gql, new_session(), media_id)
    await services.redis.zrem(dirty_index_key(services.keys), str(decode_id(channel.user["id"], "User")))
    assert await worker.repair_index(services) >= 1
    await roll_up_everything(services)
    await forget_redis(services)
    assert (await stream_stats(gql, media_id))["total"] == 1


async def test_the_worker_process_rolls_up_within_its_interval(gql, http, services, live_servers):
    process = live_servers.spawn("worker", "playback", MEDIAGRAPH_PLAYBACK_ROLLUP_INTERVAL_SECONDS="0.2")
    try:
        channel = await make_channel(gql, http)
        media_id = channel.media[0]["id"]
        for _ in range(3):
            await report(gql, new_session(), media_id)
        stream_id = decode_id(media_id, "Media")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            async with services.databases.main_session() as session:
                rows = (
                    await session.execute(select(PlaybackTotal).where(col(PlaybackTotal.entity_id) == stream_id))
                ).scalars()
                if sum(row.plays for row in rows) == 3:
                    break
            assert process.poll() is None, "the worker exited"
            await asyncio.sleep(0.2)
        else:
            raise AssertionError("the worker did not roll up within 60 s")
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert process.returncode == 0, "the worker stops cleanly on SIGTERM"


async def test_the_worker_retries_a_failed_roll_up_without_stopping(gql, http, services, monkeypatch):
    monkeypatch.setattr(services.settings, "playback_rollup_interval_seconds", 0.05)
    real_store = worker.store_rows
    failures = []

    async def flaky_store(totals, buckets, services_):
        if not failures:
            failures.append(len(totals) + len(buckets))
            raise ConnectionError("PostgreSQL went away")
        await real_store(totals, buckets, services_)

    monkeypatch.setattr(worker, "store_rows", flaky_store)
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    await report(gql, new_session(), media_id)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(services, stop))
    try:
        stream_id = decode_id(media_id, "Media")
        for _ in range(300):
            async with services.databases.main_session() as session:
                rows = (
                    await session.execute(select(PlaybackTotal).where(col(PlaybackTotal.entity_id) == stream_id))
                ).scalars()
                if [row.plays for row in rows] == [1]:
                    break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the worker never copied the total")
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
    assert failures, "the first copy failed"


async def test_while_redis_is_unreachable_heartbeats_are_refused_and_stats_come_from_postgres(
    gql, http, clock, services, monkeypatch
):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    clock.set(datetime(2031, 5, 6, 9, 0, tzinfo=UTC))
    await report(gql, new_session(), media_id)
    await roll_up_everything(services)
    unreachable = Redis.from_url(f"redis://127.0.0.1:{free_port()}", socket_connect_timeout=1)
    monkeypatch.setattr(services, "redis", unreachable)
    try:
        assert await gql.error_code(REPORT, {"session": new_session(), "media": media_id}) == "SERVICE_UNAVAILABLE"
        result = await gql(STREAM_STATS, {"media": media_id, "granularity": "HOUR"})
        stats = result["data"]["playbackStats"]
        assert (stats["total"], stats["series"][-1]["count"], stats["concurrent"]) == (1, 1, None)
        assert [error["extensions"]["code"] for error in result["errors"]] == ["SERVICE_UNAVAILABLE"]
    finally:
        monkeypatch.undo()
        await unreachable.aclose()
    assert (await stream_stats(gql, media_id, "HOUR"))["total"] == 1, "nothing was counted while refused"
