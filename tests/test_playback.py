from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from mediagraph.ids import to_global_id
from mediagraph.keys.playback import session_claim_key
from tests.support.playback import (
    REPORT,
    STREAM_STATS,
    ReferenceModel,
    channel_stats,
    counts,
    iso,
    make_channel,
    new_session,
    peaks,
    report,
    stream_stats,
)


async def test_first_heartbeat_counts_everywhere_and_repeats_count_nothing(gql, http, clock):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    session = new_session()
    clock.set(datetime(2031, 3, 14, 12, 0, 3, tzinfo=UTC))

    first = await report(gql, session, media_id)
    assert first == {
        "sessionId": session,
        "mediaId": media_id,
        "countedAt": iso(clock.now),
        "counted": ["TOTAL", "MINUTE", "HOUR", "DAY"],
        "concurrent": 1,
    }
    clock.advance(5)
    assert (await report(gql, session, media_id))["counted"] == []

    stats = await stream_stats(gql, media_id, "MINUTE", clock.now - timedelta(minutes=1), clock.now)
    assert stats["total"] == 1
    assert stats["concurrent"] == 1
    assert counts(stats["series"]) == [
        (iso(datetime(2031, 3, 14, 11, 59, tzinfo=UTC)), 0),
        (iso(clock.now.replace(second=0)), 1),
    ]
    channel_figures = await channel_stats(gql, channel.user["id"], "DAY", clock.now, clock.now + timedelta(seconds=1))
    assert channel_figures["total"] == 1
    assert counts(channel_figures["series"]) == [(iso(datetime(2031, 3, 14, tzinfo=UTC)), 1)]


async def test_heartbeats_across_minute_hour_and_day_boundaries_follow_the_seed_rules(gql, http, clock):
    channel = await make_channel(gql, http, media=2)
    streams = [media["id"] for media in channel.media]
    model = ReferenceModel()
    sessions = {name: new_session() for name in ("a", "b", "c", "d")}
    # (seconds after 22:59:40, session, stream): a watches across the hour and, after a
    # pause, across midnight; b hops in and out; c starts on the other stream; d
    # starts just before midnight.
    start = datetime(2031, 3, 14, 22, 59, 40, tzinfo=UTC)
    plan: list[tuple[float, str, int]] = []
    plan += [(t, "a", 0) for t in range(0, 45, 5)]
    plan += [(t, "b", 0) for t in (15, 20, 25)]
    plan += [(t, "c", 1) for t in range(10, 100, 5)]
    plan += [(t, "b", 0) for t in (130, 135)]
    # a resumes later in the same hour (only a new minute), then runs past midnight.
    plan += [(t, "a", 0) for t in range(3550, 3640, 5)]
    plan += [(t, "d", 1) for t in range(3595, 3650, 5)]
    plan.sort()
    for offset, name, stream in plan:
        clock.set(start + timedelta(seconds=offset))
        reported = await report(gql, sessions[name], streams[stream])
        expected = model.heartbeat(sessions[name], entities=[f"s{stream}", "channel"], at=clock.now)
        assert reported["counted"] == expected, (offset, name)

    window = {
        "MINUTE": (start - timedelta(minutes=1), clock.now + timedelta(minutes=1)),
        "HOUR": (start - timedelta(hours=1), clock.now + timedelta(hours=1)),
        "DAY": (start - timedelta(days=1), clock.now + timedelta(days=1)),
    }
    for granularity, (first, last) in window.items():
        for index, media_id in enumerate(streams):
            stats = await stream_stats(gql, media_id, granularity, first, last)
            assert counts(stats["series"]) == model.series(f"s{index}", granularity, first, last), granularity
            assert stats["total"] == model.total(f"s{index}")
        figures = await channel_stats(gql, channel.user["id"], granularity, first, last)
        assert counts(figures["series"]) == model.series("channel", granularity, first, last), granularity
        assert figures["total"] == model.total("channel") == 4
    # Spot checks of the model itself: a and b both crossed 23:00; a alone crossed midnight
    # on the first stream, d on the second.
    hours = await stream_stats(gql, streams[0], "HOUR", *window["HOUR"])
    assert [bucket["count"] for bucket in hours["series"]] == [0, 2, 2, 1, 0]
    days = await channel_stats(gql, channel.user["id"], "DAY", *window["DAY"])
    assert [bucket["count"] for bucket in days["series"]] == [0, 4, 2, 0]


async def test_concurrent_duplicate_heartbeats_count_once(gql, http, clock):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    session = new_session()
    clock.set(datetime(2031, 3, 14, 23, 59, 58, tzinfo=UTC))

    first = await asyncio.gather(*(report(gql, session, media_id) for _ in range(12)))
    assert sorted(tuple(result["counted"]) for result in first) == [()] * 11 + [("TOTAL", "MINUTE", "HOUR", "DAY")]
    clock.advance(5)  # past midnight: a new minute, hour and day
    crossing = await asyncio.gather(*(report(gql, session, media_id) for _ in range(12)))
    assert sorted(tuple(result["counted"]) for result in crossing) == [()] * 11 + [("MINUTE", "HOUR", "DAY")]

    for granularity in ("MINUTE", "HOUR", "DAY"):
        stats = await stream_stats(gql, media_id, granularity, clock.now - timedelta(seconds=5), clock.now)
        assert [bucket["count"] for bucket in stats["series"]] == [1, 1], granularity
        assert [bucket["peak"] for bucket in stats["series"]] == [1, 1], granularity
        assert stats["total"] == 1
        assert stats["concurrent"] == 1


async def test_a_session_is_live_for_15_seconds_after_its_last_heartbeat(gql, http, clock):
    channel = await make_channel(gql, http, media=2)
    first, second = (media["id"] for media in channel.media)
    clock.set(datetime(2031, 3, 14, 8, 0, 0, tzinfo=UTC))
    await report(gql, new_session(), first)
    clock.advance(3)
    assert (await report(gql, new_session(), second))["concurrent"] == 1
    assert (await channel_stats(gql, channel.user["id"]))["concurrent"] == 2

    clock.advance(12)  # 15 s after the first session's heartbeat: still live
    assert (await stream_stats(gql, first))["concurrent"] == 1
    clock.advance(0.001)
    assert (await stream_stats(gql, first))["concurrent"] == 0
    assert (await channel_stats(gql, channel.user["id"]))["concurrent"] == 1
    clock.advance(3)
    assert (await stream_stats(gql, second))["concurrent"] == 0
    assert (await channel_stats(gql, channel.user["id"]))["concurrent"] == 0
    # A heartbeat prunes what expired: the count it reports is only the live sessions.
    assert (await report(gql, new_session(), first))["concurrent"] == 1


async def test_peaks_are_the_most_concurrent_viewers_per_minute_hour_and_day(gql, http, clock):
    channel = await make_channel(gql, http, media=2)
    first, second = (media["id"] for media in channel.media)
    sessions = [new_session() for _ in range(4)]
    start = datetime(2031, 3, 14, 10, 58, 50, tzinfo=UTC)
    clock.set(start)
    for session in sessions[:3]:  # three viewers of the first stream
        await report(gql, session, first)
        clock.advance(1)
    await report(gql, sessions[3], second)
    # Past 10:59 and then 11:00, only one viewer of the first stream keeps watching.
    for offset in (15, 20, 25, 30, 75, 80):
        clock.set(start + timedelta(seconds=offset))
        await report(gql, sessions[0], first)

    minute_range = (datetime(2031, 3, 14, 10, 58, tzinfo=UTC), datetime(2031, 3, 14, 11, 1, tzinfo=UTC))
    stream = await stream_stats(gql, first, "MINUTE", *minute_range)
    assert peaks(stream["series"]) == [
        (iso(datetime(2031, 3, 14, 10, 58, tzinfo=UTC)), 3),
        (iso(datetime(2031, 3, 14, 10, 59, tzinfo=UTC)), 3),  # at 10:59:05 the others are still live
        (iso(datetime(2031, 3, 14, 11, 0, tzinfo=UTC)), 1),
    ]
    assert [bucket["count"] for bucket in stream["series"]] == [3, 1, 1]
    channel_minutes = await channel_stats(gql, channel.user["id"], "MINUTE", *minute_range)
    assert [bucket["peak"] for bucket in channel_minutes["series"]] == [4, 4, 1]
    hours = await channel_stats(gql, channel.user["id"], "HOUR", start, start + timedelta(hours=1))
    assert [bucket["peak"] for bucket in hours["series"]] == [4, 1]
    days = await channel_stats(gql, channel.user["id"], "DAY", start, start + timedelta(seconds=1))
    assert [bucket["peak"] for bucket in days["series"]] == [4]


async def test_late_heartbeats_count_in_their_own_minute_and_older_ones_count_nothing(gql, http, clock):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    session = new_session()
    clock.set(datetime(2031, 3, 14, 9, 30, 10, tzinfo=UTC))
    played = datetime(2031, 3, 14, 9, 29, 55, tzinfo=UTC)  # delivered 15 s late
    late = await report(gql, session, media_id, at=played)
    assert late["countedAt"] == iso(played)
    assert late["counted"] == ["TOTAL", "MINUTE", "HOUR", "DAY"]
    assert (await report(gql, session, media_id))["counted"] == ["MINUTE"]
    # A retry of an even older heartbeat arriving now changes nothing.
    assert (await report(gql, session, media_id, at=played - timedelta(seconds=5)))["counted"] == []
    ahead = await report(gql, session, media_id, at=clock.now + timedelta(seconds=20))
    assert ahead["countedAt"] == iso(clock.now), "a player clock ahead counts at the server's time"

    stats = await stream_stats(gql, media_id, "MINUTE", played, clock.now)
    assert counts(stats["series"]) == [(iso(played.replace(second=0)), 1), (iso(clock.now.replace(second=0)), 1)]


async def test_rejected_heartbeats_count_nothing(gql, http, clock):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    clock.set(datetime(2031, 3, 14, 7, 0, tzinfo=UTC))
    cases = [
        ({"session": "not-a-uuid", "media": media_id}, "BAD_USER_INPUT"),
        ({"session": "00000000-0000-0000-0000-000000000000", "media": media_id}, "BAD_USER_INPUT"),
        ({"session": new_session(), "media": "bm9wZQ"}, "BAD_USER_INPUT"),
        ({"session": new_session(), "media": channel.user["id"]}, "BAD_USER_INPUT"),
        ({"session": new_session(), "media": "TWVkaWE6OTk5OTk5OTk5OQ"}, "NOT_FOUND"),  # Media:9999999999
        ({"session": new_session(), "media": media_id, "at": iso(clock.now + timedelta(seconds=31))}, "BAD_USER_INPUT"),
        ({"session": new_session(), "media": media_id, "at": iso(clock.now - timedelta(seconds=61))}, "BAD_USER_INPUT"),
        ({"session": new_session(), "media": media_id, "at": "2031-03-14T07:00:00"}, "BAD_USER_INPUT"),
        ({"session": new_session(), "media": media_id, "at": "yesterday"}, "BAD_USER_INPUT"),
    ]
    for variables, code in cases:
        assert await gql.error_code(REPORT, variables) == code, variables
    stats = await stream_stats(gql, media_id, "DAY")
    assert (stats["total"], stats["concurrent"], stats["series"][-1]["count"]) == (0, 0, 0)
    # Inline in the document, a malformed UUID fails validation, never as an internal error.
    inline = await gql(f'mutation {{ reportPlayback(sessionId: "x", mediaId: "{media_id}") {{ counted }} }}')
    assert inline["errors"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"


async def test_a_session_id_belongs_to_one_media(gql, http, clock):
    first = await make_channel(gql, http)
    second = await make_channel(gql, http, media=2)
    session = new_session()
    clock.set(datetime(2031, 3, 14, 6, 0, tzinfo=UTC))
    await report(gql, session, first.media[0]["id"])
    for other in (second.media[0]["id"], second.media[1]["id"]):
        clock.advance(5)
        code = await gql.error_code(REPORT, {"session": session, "media": other})
        assert code == "CONFLICT"
    assert (await channel_stats(gql, second.user["id"]))["total"] == 0
    assert (await stream_stats(gql, first.media[0]["id"]))["total"] == 1


async def test_session_churn_from_one_address_is_rate_limited(gql, http, clock, services, monkeypatch):
    monkeypatch.setattr(services.settings, "playback_new_sessions_per_minute", 3)
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    clock.set(datetime(2031, 3, 14, 5, 0, tzinfo=UTC))
    kept = new_session()
    await report(gql, kept, media_id)
    for _ in range(2):
        await report(gql, new_session(), media_id)
    refused = new_session()
    result = await gql(REPORT, {"session": refused, "media": media_id})
    error = result["errors"][0]["extensions"]
    assert error["code"] == "RATE_LIMITED"
    assert 1 <= error["retryAfter"] <= 60
    assert not await services.redis.exists(session_claim_key(services.keys, refused)), (
        "a refused session keeps no claim"
    )
    clock.advance(5)
    assert (await report(gql, kept, media_id))["counted"] == [], "sessions already started keep reporting"
    assert (await stream_stats(gql, media_id))["total"] == 3


async def test_series_ranges_are_bounded_and_default_to_recent_buckets(gql, http, clock):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    clock.set(datetime(2031, 3, 14, 4, 30, 20, tzinfo=UTC))
    recent = (await stream_stats(gql, media_id, "MINUTE"))["series"]
    assert len(recent) == 60
    assert recent[-1]["start"] == iso(datetime(2031, 3, 14, 4, 30, tzinfo=UTC))
    assert recent[-1]["end"] == iso(datetime(2031, 3, 14, 4, 31, tzinfo=UTC))
    assert len((await stream_stats(gql, media_id, "DAY"))["series"]) == 30

    now = datetime(2031, 3, 14, 4, 30, tzinfo=UTC)
    allowed = await stream_stats(gql, media_id, "MINUTE", now - timedelta(hours=24), now)
    assert len(allowed["series"]) == 1440
    too_long = [
        ("MINUTE", now - timedelta(hours=24, minutes=1), now),
        ("HOUR", now - timedelta(days=32), now),
        ("DAY", now - timedelta(days=400), now),
    ]
    for granularity, start, end in too_long:
        variables = {"media": media_id, "granularity": granularity, "from": iso(start), "to": iso(end)}
        assert await gql.error_code(STREAM_STATS, variables) == "BAD_USER_INPUT", granularity
    later = clock.now
    refused = [
        (later, later),
        (later, later - timedelta(minutes=1)),
        ("2031-03-14T04:00:00", iso(later)),
        ("1969-12-31T23:00:00+00:00", iso(later)),
        ("9999-12-31T00:00:00+00:00", "9999-12-31T23:59:59+00:00"),
    ]
    for start, end in refused:
        variables = {"media": media_id, "granularity": "HOUR", "from": _text(start), "to": _text(end)}
        assert await gql.error_code(STREAM_STATS, variables) == "BAD_USER_INPUT"


async def test_stats_of_unknown_media_or_user_are_not_found(gql):
    assert await gql.error_code(STREAM_STATS, {"media": "TWVkaWE6OTk5OTk5OTk5OQ", "granularity": "DAY"}) == "NOT_FOUND"
    unknown_user = "VXNlcjo5OTk5OTk5OTk5"  # User:9999999999
    query = "query($u: ID!) { channelStats(userId: $u) { total } }"
    assert await gql.error_code(query, {"u": unknown_user}) == "NOT_FOUND"


def _text(moment: datetime | str) -> str:
    return moment if isinstance(moment, str) else iso(moment)


async def test_a_playing_session_reports_without_touching_the_database(gql, http, clock, count_queries):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    session = new_session()
    clock.set(datetime(2031, 3, 14, 3, 0, tzinfo=UTC))
    await report(gql, session, media_id)
    count_queries.clear()
    for _ in range(3):
        clock.advance(5)
        await report(gql, session, media_id)
    assert count_queries == [], "the session's claim remembers its channel"


async def test_stats_of_many_media_load_in_batches(gql, http, clock, count_queries):
    channel = await make_channel(gql, http, media=3)
    clock.set(datetime(2031, 3, 14, 2, 0, tzinfo=UTC))
    for media in channel.media:
        await report(gql, new_session(), media["id"])
    aliases = " ".join(
        f'm{n}: playbackStats(mediaId: "{media["id"]}") {{ total concurrent }}' for n, media in enumerate(channel.media)
    )
    count_queries.clear()
    data = await gql.ok(f"query {{ {aliases} }}")
    assert [data[f"m{n}"]["total"] for n in range(3)] == [1, 1, 1]
    assert len(count_queries) == 2, count_queries  # the media, then their totals


NESTED_STATS = """
query($media: ID!, $username: String!) {
  media(id: $media) { playbackStats { total concurrent } uploader { channelStats { total concurrent } } }
  user(username: $username) { channelStats { total } }
}
"""


async def test_media_and_user_carry_their_playback_stats(gql, http, clock):
    channel = await make_channel(gql, http, media=2)
    first, second = (media["id"] for media in channel.media)
    clock.set(datetime(2031, 5, 1, 9, 0, tzinfo=UTC))
    await report(gql, new_session(), first)
    await report(gql, new_session(), first)
    await report(gql, new_session(), second)

    data = await gql.ok(NESTED_STATS, {"media": first, "username": channel.user["username"]})
    assert data["media"]["playbackStats"] == {"total": 2, "concurrent": 2}
    assert data["media"]["uploader"]["channelStats"] == {"total": 3, "concurrent": 3}
    assert data["user"]["channelStats"] == {"total": 3}


STATS_NODES = """
query($media: ID!, $user: ID!) {
  playbackStats(mediaId: $media) { id currentMinute { start count peak } }
  channelStats(userId: $user) { id }
}
"""
NODE = "query($id: ID!) { node(id: $id) { __typename id ... on PlaybackStats { total concurrent } } }"


async def test_playback_stats_are_nodes_named_by_their_subject(gql, http, clock):
    channel = await make_channel(gql, http)
    media_id = channel.media[0]["id"]
    clock.set(datetime(2031, 5, 2, 9, 30, 20, tzinfo=UTC))
    await report(gql, new_session(), media_id)
    await report(gql, new_session(), media_id)

    data = await gql.ok(STATS_NODES, {"media": media_id, "user": channel.user["id"]})
    stream, channel_figures = data["playbackStats"], data["channelStats"]
    assert stream["currentMinute"] == {"start": iso(datetime(2031, 5, 2, 9, 30, tzinfo=UTC)), "count": 2, "peak": 2}
    assert stream["id"] != channel_figures["id"]
    again = await gql.ok(STATS_NODES, {"media": media_id, "user": channel.user["id"]})
    assert again["playbackStats"]["id"] == stream["id"]

    for stats in (stream, channel_figures):
        found = (await gql.ok(NODE, {"id": stats["id"]}))["node"]
        assert found == {"__typename": "PlaybackStats", "id": stats["id"], "total": 2, "concurrent": 2}
    assert (await gql.ok(NODE, {"id": to_global_id("PlaybackStats", 1, 999_999_999)}))["node"] is None
