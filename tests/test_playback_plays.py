"""Plays as durable records: the roll-up copies each session's play into `plays`."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import text

from mediagraph.db.playback import partition_days
from mediagraph.ids import decode_id
from mediagraph.keys.playback import domain_pattern
from mediagraph.keys.playback.scripts import PlayValue
from mediagraph.workers import playback as worker
from tests.support.factories import create_user
from tests.support.playback import REPORT, iso, make_channel, new_session, report, stream_stats

PLAY_ROWS = text(
    "SELECT id, media_id, channel_id, viewer_id, started_at, last_heartbeat_at, watch_ms, xmin::text AS version "
    "FROM plays WHERE channel_id = :channel ORDER BY started_at, id"
)


async def play_rows(services, channel_id: int) -> list[dict]:
    async with services.databases.main_session() as session:
        return [dict(row._mapping) for row in await session.execute(PLAY_ROWS, {"channel": channel_id})]


async def forget_redis(services) -> None:
    async for key in services.redis.scan_iter(match=domain_pattern(services.keys), count=1000):
        await services.redis.delete(key)


async def roll_up_everything(services) -> None:
    for _ in range(100):
        if await worker.roll_up_once(services) == 0:
            return
    raise AssertionError("the roll-up never ran out of dirty channels")


async def heartbeats(gql, clock, session, media_id, start, offsets, *, token=None) -> None:
    for offset in offsets:
        clock.set(start + timedelta(seconds=offset))
        variables = {"session": session, "media": media_id, "at": None}
        await gql.ok(REPORT, variables, token=token)


async def test_a_play_is_recorded_with_its_watch_time(gql, http, clock, services):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    viewer_token, viewer = await create_user(gql)
    session = new_session()
    start = datetime(2031, 6, 1, 12, 0, 1, tzinfo=UTC)
    await heartbeats(gql, clock, session, media_id, start, [0, 5, 10, 15], token=viewer_token)
    await roll_up_everything(services)

    channel_id = decode_id(channel.user["id"], "User")
    [row] = await play_rows(services, channel_id)
    assert row["id"] == uuid.UUID(session)
    assert row["media_id"] == decode_id(media_id, "Media")
    assert row["viewer_id"] == decode_id(viewer["id"], "User")
    assert row["started_at"] == start
    assert row["last_heartbeat_at"] == start + timedelta(seconds=15)
    assert row["watch_ms"] == 15_000

    # The same play goes on: the roll-up moves the row forward rather than adding one.
    await heartbeats(gql, clock, session, media_id, start, [20, 25])
    await roll_up_everything(services)
    [row] = await play_rows(services, channel_id)
    assert row["watch_ms"] == 25_000
    assert row["last_heartbeat_at"] == start + timedelta(seconds=25)


async def test_a_paused_player_adds_at_most_one_capped_gap(gql, http, clock, services):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    session = new_session()
    start = datetime(2031, 6, 2, 9, 0, tzinfo=UTC)
    # Playing 10 s, paused for five minutes (no heartbeats), playing 5 s more; a retried
    # heartbeat (the same `at`) and an anonymous viewer.
    await heartbeats(gql, clock, session, media_id, start, [0, 5, 10, 310, 315])
    clock.set(start + timedelta(seconds=316))
    await report(gql, session, media_id, at=start + timedelta(seconds=315))
    await roll_up_everything(services)
    [row] = await play_rows(services, decode_id(channel.user["id"], "User"))
    assert row["watch_ms"] == 5_000 + 5_000 + 10_000 + 5_000
    assert row["viewer_id"] is None
    # The play ended during the pause and the later heartbeat re-opened the same play.
    assert row["last_heartbeat_at"] == start + timedelta(seconds=315)


async def test_replaying_a_batch_changes_nothing(gql, http, clock, services):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    sessions = [new_session() for _ in range(3)]
    start = datetime(2031, 6, 3, 23, 59, 50, tzinfo=UTC)
    for session in sessions:
        await heartbeats(gql, clock, session, media_id, start, [0, 5, 10, 15])
    channel_id = decode_id(channel.user["id"], "User")
    await roll_up_everything(services)
    before = await play_rows(services, channel_id)
    assert len(before) == 3

    batch = [
        PlayValue(
            session_id=str(row["id"]),
            media_id=row["media_id"],
            channel_id=channel_id,
            viewer_id=row["viewer_id"],
            started_ms=int(row["started_at"].timestamp() * 1000),
            last_ms=int(row["last_heartbeat_at"].timestamp() * 1000),
            watch_ms=row["watch_ms"],
        )
        for row in before
    ]
    await worker.store_plays(batch, services)
    # An older copy of the same batch (a worker that read Redis earlier) lowers nothing.
    older = [
        PlayValue(**{**play.__dict__, "last_ms": play.last_ms - 5000, "watch_ms": play.watch_ms - 5000})
        for play in batch
    ]
    await worker.store_plays(older, services)
    after = await play_rows(services, channel_id)
    # Same values, and not even a new row version.
    assert after == before


async def test_expired_partitions_are_dropped_and_upcoming_ones_made(gql, http, clock, services):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    old_day = datetime(2031, 3, 1, 10, 0, tzinfo=UTC)
    await heartbeats(gql, clock, new_session(), media_id, old_day, [0, 5])
    await roll_up_everything(services)
    channel_id = decode_id(channel.user["id"], "User")
    assert len(await play_rows(services, channel_id)) == 1

    clock.set(old_day + timedelta(days=services.settings.play_history_days))
    made, dropped = await worker.maintain_partitions(services)
    assert date(2031, 3, 1) not in dropped, "a play stays its full history"
    assert clock.now.date() in made or clock.now.date() in await _partition_days(services)

    clock.set(old_day + timedelta(days=services.settings.play_history_days + 1))
    made, dropped = await worker.maintain_partitions(services)
    assert date(2031, 3, 1) in dropped
    assert await play_rows(services, channel_id) == []
    days = await _partition_days(services)
    today = clock.now.date()
    assert {today, today + timedelta(days=1), today + timedelta(days=2)} <= set(days)
    assert min(days) >= today - timedelta(days=services.settings.play_history_days)

    # A straggler of an expired day is not written back (its partition stays gone).
    started_ms = int(old_day.timestamp() * 1000)
    late = PlayValue(new_session(), decode_id(media_id, "Media"), channel_id, None, started_ms, started_ms + 5000, 5000)
    await worker.store_plays([late], services)
    assert await play_rows(services, channel_id) == []


async def _partition_days(services) -> list[date]:
    return await partition_days(services.databases.main_reads)


OWNER_FIGURES = """
query($media: ID!, $granularity: PlaybackGranularity!, $from: DateTime, $to: DateTime) {
  playbackStats(mediaId: $media) {
    total watchSeconds averageViewDurationSeconds
    series(granularity: $granularity, from: $from, to: $to) {
      start count watchSeconds averageViewDurationSeconds uniqueViewers
    }
  }
}
"""


async def owner_figures(gql, token, media_id, granularity, start, end):
    variables = {"media": media_id, "granularity": granularity, "from": iso(start), "to": iso(end)}
    return (await gql.ok(OWNER_FIGURES, variables, token=token))["playbackStats"]


async def test_watch_time_of_a_play_spanning_midnight_counts_in_each_bucket(gql, http, clock, services):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    start = datetime(2031, 6, 4, 23, 59, 50, tzinfo=UTC)
    await heartbeats(gql, clock, new_session(), media_id, start, [0, 5, 10, 15, 20])
    midnight = datetime(2031, 6, 5, tzinfo=UTC)
    for rolled_up in (False, True):
        days = await owner_figures(gql, channel.token, media_id, "DAY", midnight - timedelta(days=1), midnight)
        hours = await owner_figures(gql, channel.token, media_id, "HOUR", midnight - timedelta(hours=1), midnight)
        # Heartbeats at 23:59:55 (5 s) on the first day; at 00:00:00, :05 and :10 on the next.
        series = (await owner_figures(gql, channel.token, media_id, "DAY", start, midnight + timedelta(days=1)))[
            "series"
        ]
        assert [bucket["watchSeconds"] for bucket in series] == [5.0, 15.0], rolled_up
        assert [bucket["averageViewDurationSeconds"] for bucket in series] == [5.0, 15.0]
        series = (await owner_figures(gql, channel.token, media_id, "HOUR", start, midnight + timedelta(hours=1)))[
            "series"
        ]
        assert [bucket["watchSeconds"] for bucket in series] == [5.0, 15.0]
        assert days["watchSeconds"] == hours["watchSeconds"] == 20.0
        assert days["averageViewDurationSeconds"] == 20.0
        if not rolled_up:
            await roll_up_everything(services)
            await forget_redis(services)


async def test_owner_figures_are_the_channel_owners_alone(gql, http, clock, services):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    viewer_token, _ = await create_user(gql)
    start = datetime(2031, 6, 6, 10, 0, 1, tzinfo=UTC)
    # The same signed-in viewer in two sessions, and two anonymous sessions.
    await heartbeats(gql, clock, new_session(), media_id, start, [0, 5], token=viewer_token)
    await heartbeats(gql, clock, new_session(), media_id, start, [10, 15], token=viewer_token)
    await heartbeats(gql, clock, new_session(), media_id, start, [20, 25])
    await heartbeats(gql, clock, new_session(), media_id, start, [30, 35])
    minute = datetime(2031, 6, 6, 10, 0, tzinfo=UTC)
    await roll_up_everything(services)
    await forget_redis(services)
    figures = await owner_figures(gql, channel.token, media_id, "MINUTE", minute, minute + timedelta(minutes=1))
    [bucket] = figures["series"]
    assert bucket["count"] == 4
    assert bucket["uniqueViewers"] == 3
    assert bucket["watchSeconds"] == 20.0
    assert bucket["averageViewDurationSeconds"] == 5.0

    variables = {
        "media": media_id,
        "granularity": "MINUTE",
        "from": iso(minute),
        "to": iso(minute + timedelta(minutes=1)),
    }
    for token in (viewer_token, None):
        assert await gql.error_code(OWNER_FIGURES, variables, token=token) == "FORBIDDEN"
    # Public figures stay public.
    stats = await stream_stats(gql, media_id, "MINUTE", minute, minute + timedelta(minutes=1))
    assert stats["total"] == 4
    channel_figures = await gql.ok(
        "query($user: ID!) { channelStats(userId: $user) { watchSeconds averageViewDurationSeconds } }",
        {"user": channel.user["id"]},
        token=channel.token,
    )
    assert channel_figures["channelStats"] == {"watchSeconds": 20.0, "averageViewDurationSeconds": 5.0}
