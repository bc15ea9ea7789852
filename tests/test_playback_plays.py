"""Plays as durable records: the roll-up copies each session's play into `plays`."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import text

from mediagraph.db.playback import partition_days
from mediagraph.ids import decode_id
from mediagraph.keys.playback.scripts import PlayValue
from mediagraph.workers import playback as worker
from tests.support.factories import create_user
from tests.support.playback import REPORT, make_channel, new_session, report

PLAY_ROWS = text(
    "SELECT id, media_id, channel_id, viewer_id, started_at, last_heartbeat_at, watch_ms, xmin::text AS version "
    "FROM plays WHERE channel_id = :channel ORDER BY started_at, id"
)


async def play_rows(services, channel_id: int) -> list[dict]:
    async with services.databases.main_session() as session:
        return [dict(row._mapping) for row in await session.execute(PLAY_ROWS, {"channel": channel_id})]


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
