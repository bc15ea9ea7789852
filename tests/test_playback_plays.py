"""Plays as durable records: the roll-up copies each session's play into `plays`."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import text

from mediagraph.db.playback import partition_days
from mediagraph.ids import decode_id, parse_global_id, to_global_id
from mediagraph.keys.playback import domain_pattern, to_ms
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
        if await worker.roll_up_once(services, everything=True) == 0:
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
        result = await gql(OWNER_FIGURES, variables, token=token)
        assert {error["extensions"]["code"] for error in result["errors"]} == {"FORBIDDEN"}
        # Only the owner's figures are null: the rest of the answer arrives.
        stats = result["data"]["playbackStats"]
        assert stats["total"] == 4
        assert stats["watchSeconds"] is None
        assert stats["averageViewDurationSeconds"] is None
        assert stats["series"] == [
            {
                "start": iso(minute),
                "count": 4,
                "watchSeconds": None,
                "averageViewDurationSeconds": None,
                "uniqueViewers": None,
            }
        ]
    # Public figures stay public.
    stats = await stream_stats(gql, media_id, "MINUTE", minute, minute + timedelta(minutes=1))
    assert stats["total"] == 4
    channel_figures = await gql.ok(
        "query($user: ID!) { channelStats(userId: $user) { watchSeconds averageViewDurationSeconds } }",
        {"user": channel.user["id"]},
        token=channel.token,
    )
    assert channel_figures["channelStats"] == {"watchSeconds": 20.0, "averageViewDurationSeconds": 5.0}


PLAYS = """
query($media: ID!, $first: Int, $after: String, $last: Int, $before: String, $since: DateTime, $until: DateTime) {
  playbackStats(mediaId: $media) {
    total
    plays(first: $first, after: $after, last: $last, before: $before, since: $since, until: $until) {
      edges { cursor node { id sessionId startedAt lastHeartbeatAt watchSeconds ended media { id } } }
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
    }
  }
}
"""
CHANNEL_PLAYS = """
query($user: ID!, $first: Int, $after: String) {
  channelStats(userId: $user) {
    plays(first: $first, after: $after) {
      edges { node { id sessionId startedAt media { id } } }
      pageInfo { hasNextPage }
    }
  }
}
"""


async def plays_of(gql, token, media_id, **arguments):
    variables = {"media": media_id, **arguments}
    return (await gql.ok(PLAYS, variables, token=token))["playbackStats"]["plays"]


async def all_pages(gql, token, media_id, size, *, backward=False, **bounds) -> list[str]:
    """Every play's session id, paging `size` at a time forward (or backward from the end)."""
    seen: list[str] = []
    cursor = None
    while True:
        if backward:
            page = await plays_of(gql, token, media_id, last=size, before=cursor, **bounds)
            seen[:0] = [edge["node"]["sessionId"] for edge in page["edges"]]
            if not page["pageInfo"]["hasPreviousPage"]:
                return seen
            cursor = page["pageInfo"]["startCursor"]
        else:
            page = await plays_of(gql, token, media_id, first=size, after=cursor, **bounds)
            seen += [edge["node"]["sessionId"] for edge in page["edges"]]
            if not page["pageInfo"]["hasNextPage"]:
                return seen
            cursor = page["pageInfo"]["endCursor"]


async def test_plays_page_newest_first_both_ways_within_since_and_until(gql, http, clock, services):
    channel = await make_channel(gql, http, media=2)
    media_id, other_media = channel.media[0]["id"], channel.media[1]["id"]
    start = datetime(2031, 7, 1, 23, 58, tzinfo=UTC)
    # Five plays a minute apart, across midnight; two of them start in the same millisecond.
    started = {}
    for n, minute in enumerate([0, 1, 2, 2, 3]):
        session = new_session()
        started[session] = start + timedelta(minutes=minute)
        await heartbeats(gql, clock, session, media_id, started[session], [0, 5 + n])
    elsewhere = new_session()
    await heartbeats(gql, clock, elsewhere, other_media, start, [30, 35])
    await roll_up_everything(services)

    newest_first = sorted(started, key=lambda session: (started[session], uuid.UUID(session)), reverse=True)
    first_page = await plays_of(gql, channel.token, media_id, first=2)
    assert first_page["pageInfo"]["hasNextPage"] is True
    assert first_page["pageInfo"]["hasPreviousPage"] is False
    [newest, _] = [edge["node"] for edge in first_page["edges"]]
    assert newest["sessionId"] == newest_first[0]
    assert newest["startedAt"] == iso(start + timedelta(minutes=3))
    assert newest["lastHeartbeatAt"] == iso(start + timedelta(minutes=3, seconds=9))
    assert newest["watchSeconds"] == 9.0
    assert newest["media"] == {"id": media_id}
    for size in (1, 2, 5, 100):
        assert await all_pages(gql, channel.token, media_id, size) == newest_first
        assert await all_pages(gql, channel.token, media_id, size, backward=True) == newest_first

    # Plays that started in [since, until): the two at 00:00:00 and the one at 00:01:00, not 23:59 or earlier.
    midnight = datetime(2031, 7, 2, tzinfo=UTC)
    bounds = {"since": iso(midnight), "until": iso(midnight + timedelta(minutes=1, seconds=1))}
    assert await all_pages(gql, channel.token, media_id, 1, **bounds) == newest_first[:3]
    assert await all_pages(gql, channel.token, media_id, 1, backward=True, **bounds) == newest_first[:3]
    assert await all_pages(gql, channel.token, media_id, 2, since=iso(midnight)) == newest_first[:3]
    assert await all_pages(gql, channel.token, media_id, 2, until=iso(midnight)) == newest_first[3:]

    # The channel's plays are every stream's.
    channel_plays = (await gql.ok(CHANNEL_PLAYS, {"user": channel.user["id"], "first": 10}, token=channel.token))[
        "channelStats"
    ]["plays"]
    assert [edge["node"]["sessionId"] for edge in channel_plays["edges"]] == [
        *newest_first[:4],
        elsewhere,
        newest_first[4],
    ]
    # One play, one id, whichever list it arrives through.
    stream_plays = await plays_of(gql, channel.token, media_id, first=10)
    stream_ids = {edge["node"]["sessionId"]: edge["node"]["id"] for edge in stream_plays["edges"]}
    assert {edge["node"]["sessionId"]: edge["node"]["id"] for edge in channel_plays["edges"][:4]} == {
        session: stream_ids[session] for session in newest_first[:4]
    }
    assert channel_plays["edges"][4]["node"]["media"] == {"id": other_media}


async def test_bad_play_pages_are_refused_naming_the_argument(gql, http, clock, services):
    channel = await make_channel(gql, http, media=2)
    media_id = channel.media[0]["id"]
    start = datetime(2031, 7, 3, 10, 0, tzinfo=UTC)
    for minute in range(2):
        await heartbeats(gql, clock, new_session(), media_id, start + timedelta(minutes=minute), [0, 5])
    await heartbeats(gql, clock, new_session(), channel.media[1]["id"], start, [0, 5])
    await roll_up_everything(services)
    cursor = (await plays_of(gql, channel.token, media_id, first=1))["pageInfo"]["endCursor"]
    other_cursor = (await plays_of(gql, channel.token, channel.media[1]["id"], first=1))["pageInfo"]["endCursor"]

    refused = [
        ({"first": 0}, "first"),
        ({"first": 101}, "first"),
        ({"after": "not-a-cursor"}, "after"),
        ({"after": cursor[:-2] + "xx"}, "after"),
        ({"after": other_cursor}, "after"),  # another stream's
        ({"last": 1, "before": other_cursor}, "before"),
        ({"first": 1, "last": 1}, "last"),
        ({"since": iso(start), "until": iso(start)}, "since"),
        ({"since": "3001-01-01T00:00:00Z"}, "since"),
    ]
    for arguments, argument in refused:
        result = await gql(PLAYS, {"media": media_id, **arguments}, token=channel.token)
        [error] = result["errors"]
        assert error["extensions"]["code"] == "BAD_USER_INPUT", arguments
        assert error["extensions"].get("argument") == argument, (arguments, error)
    # A DateTime without an offset never reaches the field.
    assert await gql.error_code(PLAYS, {"media": media_id, "since": "2031-07-03T10:00:00"}, token=channel.token) == (
        "BAD_USER_INPUT"
    )
    assert len((await plays_of(gql, channel.token, media_id, after=cursor))["edges"]) == 1


async def test_plays_are_the_channel_owners_alone(gql, http, clock, services):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    viewer_token, _ = await create_user(gql)
    start = datetime(2031, 7, 4, 10, 0, tzinfo=UTC)
    await heartbeats(gql, clock, new_session(), media_id, start, [0, 5], token=viewer_token)
    await roll_up_everything(services)
    assert len((await plays_of(gql, channel.token, media_id))["edges"]) == 1
    for token in (viewer_token, None):
        result = await gql(PLAYS, {"media": media_id}, token=token)
        [error] = result["errors"]
        assert error["extensions"]["code"] == "FORBIDDEN"
        assert error["path"] == ["playbackStats", "plays"]
        # The public figures still arrive.
        assert result["data"]["playbackStats"] == {"total": 1, "plays": None}
    channel_result = await gql(CHANNEL_PLAYS, {"user": channel.user["id"]}, token=viewer_token)
    assert channel_result["errors"][0]["extensions"]["code"] == "FORBIDDEN"


async def test_a_play_ends_when_its_heartbeats_stop_and_a_later_one_reopens_it(gql, http, clock, services):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    session = new_session()
    start = datetime(2031, 7, 5, 10, 0, tzinfo=UTC)
    await heartbeats(gql, clock, session, media_id, start, [0, 5])
    await roll_up_everything(services)
    window = services.settings.playback_live_window_seconds

    async def the_play() -> dict:
        [edge] = (await plays_of(gql, channel.token, media_id))["edges"]
        return edge["node"]

    clock.set(start + timedelta(seconds=5 + window - 1))
    assert (await the_play())["ended"] is False
    # Decided when read: nothing was written since.
    clock.set(start + timedelta(seconds=5 + window + 1))
    ended = await the_play()
    assert ended["ended"] is True
    assert ended["watchSeconds"] == 5.0

    # The same session plays again 10 minutes later: the same play goes on, seen before the roll-up copies it.
    await heartbeats(gql, clock, session, media_id, start, [600])
    reopened = await the_play()
    assert reopened["id"] == ended["id"]
    assert reopened["sessionId"] == session
    # Refetched by id, it is as fresh as in the list.
    assert await refetch(gql, channel.token, reopened["id"]) == reopened
    assert reopened["ended"] is False
    assert reopened["startedAt"] == iso(start)
    assert reopened["lastHeartbeatAt"] == iso(start + timedelta(seconds=600))
    assert reopened["watchSeconds"] == 15.0  # the pause adds one capped gap
    await roll_up_everything(services)
    assert await the_play() == reopened
    assert len(await play_rows(services, decode_id(channel.user["id"], "User"))) == 1
    # Once Redis forgets the session, the copied row says the same.
    await forget_redis(services)
    assert await the_play() == reopened
    clock.set(start + timedelta(seconds=600 + window + 1))
    assert (await the_play())["ended"] is True


PLAY_NODE = """
query($id: ID!) {
  node(id: $id) { __typename id ... on Play { sessionId startedAt lastHeartbeatAt watchSeconds ended media { id } } }
}
"""
PLAY_NODES = "query($ids: [ID!]!) { nodes(ids: $ids) { __typename id ... on Play { sessionId } } }"


async def refetch(gql, token, play_id: str) -> dict | None:
    """`node(id:)` of a play, in the shape `plays` lists it."""
    node = (await gql.ok(PLAY_NODE, {"id": play_id}, token=token))["node"]
    if node is None:
        return None
    assert node.pop("__typename") == "Play"
    return node


async def test_a_plays_id_is_a_global_id_that_node_refetches_for_the_owner_alone(gql, http, clock, services):
    channel = await make_channel(gql, http)
    other_channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    viewer_token, _ = await create_user(gql)
    session = new_session()
    start = datetime(2031, 7, 6, 10, 0, tzinfo=UTC)
    await heartbeats(gql, clock, session, media_id, start, [0, 5], token=viewer_token)
    await roll_up_everything(services)
    [edge] = (await plays_of(gql, channel.token, media_id))["edges"]
    play = edge["node"]

    channel_id = decode_id(channel.user["id"], "User")
    assert parse_global_id(play["id"]) == ("Play", (channel_id, to_ms(start), uuid.UUID(session)))
    assert play["sessionId"] == session
    assert await refetch(gql, channel.token, play["id"]) == play
    both = await gql.ok(PLAY_NODES, {"ids": [play["id"], media_id]}, token=channel.token)
    assert both["nodes"] == [
        {"__typename": "Play", "id": play["id"], "sessionId": session},
        {"__typename": "Media", "id": media_id},
    ]

    # Anyone else, the viewer who played it included, gets null with FORBIDDEN, as from `plays`.
    for token in (viewer_token, other_channel.token, None):
        result = await gql(PLAY_NODE, {"id": play["id"]}, token=token)
        assert result["data"] == {"node": None}
        [error] = result["errors"]
        assert (error["extensions"]["code"], error["path"]) == ("FORBIDDEN", ["node"])
        # In `nodes(ids:)` only its own place is null; the other ids still answer.
        result = await gql(PLAY_NODES, {"ids": [media_id, play["id"]]}, token=token)
        assert result["data"] == {"nodes": [{"__typename": "Media", "id": media_id}, None]}
        [error] = result["errors"]
        assert (error["extensions"]["code"], error["path"]) == ("FORBIDDEN", ["nodes", 1])

    # Ids naming no play of the asker's channel are null: another session, or this play under another channel.
    other_id = decode_id(other_channel.user["id"], "User")
    assert await refetch(gql, channel.token, to_global_id("Play", channel_id, to_ms(start), uuid.uuid4())) is None
    assert (
        await refetch(gql, channel.token, to_global_id("Play", channel_id, to_ms(start) + 1, uuid.UUID(session)))
        is None
    )
    assert (
        await refetch(gql, other_channel.token, to_global_id("Play", other_id, to_ms(start), uuid.UUID(session)))
        is None
    )


async def test_a_session_heard_again_after_its_idle_hours_is_a_new_play_with_an_id_of_its_own(
    gql, http, clock, services
):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    session = new_session()
    start = datetime(2031, 7, 7, 10, 0, tzinfo=UTC)
    await heartbeats(gql, clock, session, media_id, start, [0, 5])
    await roll_up_everything(services)
    # Redis lets a session's records expire after its idle hours; forgetting them now does the same.
    await forget_redis(services)
    later = start + timedelta(hours=services.settings.playback_session_idle_hours, minutes=1)
    await heartbeats(gql, clock, session, media_id, later, [0, 5, 10])
    await roll_up_everything(services)

    plays = [edge["node"] for edge in (await plays_of(gql, channel.token, media_id))["edges"]]
    assert [(play["sessionId"], play["startedAt"]) for play in plays] == [(session, iso(later)), (session, iso(start))]
    assert plays[0]["id"] != plays[1]["id"]
    assert [play["watchSeconds"] for play in plays] == [10.0, 5.0]
    for play in plays:
        assert await refetch(gql, channel.token, play["id"]) == play
