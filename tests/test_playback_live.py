from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time

import httpx
import pytest

from tests.support.factories import create_user
from tests.support.graphql import GraphQLClient, WebSocketClient
from tests.support.playback import make_channel, new_session, report, stream_stats

LIVE_VIEWERS = "subscription($media: ID!) { liveViewers(mediaId: $media) }"
LIVE_CHANNEL_VIEWERS = "subscription($user: ID!) { liveChannelViewers(userId: $user) }"
LIVE_WINDOW_SECONDS = 4


@pytest.fixture(scope="module")
def server(live_servers, settings) -> str:
    # Workers on (their sweep notices sessions expiring), a short live window so the
    # test waits seconds rather than 15, and keys of its own: this server runs on the
    # real clock, the in-process tests on a fake one.
    return live_servers.start(
        MEDIAGRAPH_PLAYBACK_LIVE_WINDOW_SECONDS=str(LIVE_WINDOW_SECONDS),
        MEDIAGRAPH_REDIS_PREFIX=f"{settings.redis_prefix}live:",
    )


@pytest.fixture
async def api(server):
    async with httpx.AsyncClient(base_url=server, timeout=30) as http:
        yield GraphQLClient(http)


@pytest.fixture
async def socket(server):
    client = await WebSocketClient.connect(server.replace("http://", "ws://") + "/graphql")
    assert (await client.receive())["type"] == "connection_ack"
    yield client
    await client.close()


class Players:
    """Players heartbeating in the background, each session again and again."""

    def __init__(self, api: GraphQLClient) -> None:
        self.api = api
        self.sessions: list[tuple[str, str]] = []

    def start(self, media_id: str, count: int) -> None:
        self.sessions += [(new_session(), media_id) for _ in range(count)]

    async def run(self) -> None:
        while True:
            for session, media_id in list(self.sessions):
                await report(self.api, session, media_id)
            await asyncio.sleep(0.3)


@contextlib.asynccontextmanager
async def players(api):
    group = Players(api)
    task = asyncio.create_task(group.run())
    try:
        yield group
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def pushes_until(client, operation, field, expected):
    """The values pushed on `operation` up to and including `expected` (within 30 s)."""
    values = []
    deadline = time.monotonic() + 30
    while not values or values[-1] != expected:
        message = await client.receive(timeout=max(deadline - time.monotonic(), 0.1))
        assert message["id"] == operation
        assert message["type"] == "next", message
        values.append(message["payload"]["data"][field])
    return values


async def test_live_viewers_pushes_joins_and_the_drop_when_sessions_expire(api, socket):
    channel = await make_channel(api, api.http)
    media_id = channel.media[0]["id"]
    operation = await socket.subscribe(LIVE_VIEWERS, {"media": media_id})
    assert await pushes_until(socket, operation, "liveViewers", 0) == [0]

    async with players(api) as group:
        group.start(media_id, 3)
        climb = await pushes_until(socket, operation, "liveViewers", 3)
        assert climb == sorted(climb)
    # Nobody reports any more: once the window passes, the worker's sweep pushes the drop.
    assert (await pushes_until(socket, operation, "liveViewers", 0))[-1] == 0
    assert (await stream_stats(api, media_id))["concurrent"] == 0


async def test_a_burst_of_joins_is_coalesced_to_at_most_one_push_a_second(api, socket):
    channel = await make_channel(api, api.http)
    media_id = channel.media[0]["id"]
    operation = await socket.subscribe(LIVE_VIEWERS, {"media": media_id})
    await pushes_until(socket, operation, "liveViewers", 0)

    async with players(api) as group:
        started = time.monotonic()
        group.start(media_id, 12)
        pushed = await pushes_until(socket, operation, "liveViewers", 12)
        elapsed = time.monotonic() - started
    assert pushed == sorted(pushed)
    assert len(pushed) <= math.floor(elapsed) + 1, (pushed, elapsed)
    assert len(pushed) < 12


async def test_live_channel_viewers_counts_sessions_on_all_the_channels_media(api, socket):
    channel = await make_channel(api, api.http, media=2)
    operation = await socket.subscribe(LIVE_CHANNEL_VIEWERS, {"user": channel.user["id"]})
    await pushes_until(socket, operation, "liveChannelViewers", 0)

    async with players(api) as group:
        group.start(channel.media[0]["id"], 2)
        group.start(channel.media[1]["id"], 1)
        await pushes_until(socket, operation, "liveChannelViewers", 3)
        assert (await stream_stats(api, channel.media[1]["id"]))["concurrent"] == 1
    await pushes_until(socket, operation, "liveChannelViewers", 0)


async def test_live_viewers_of_unknown_media_is_not_found(socket):
    operation = await socket.subscribe(LIVE_VIEWERS, {"media": "TWVkaWE6OTk5OTk5OTk5OQ"})
    message = await socket.receive()
    assert message["id"] == operation
    assert message["payload"]["errors"][0]["extensions"]["code"] == "NOT_FOUND"


LIVE_VIEWERS_UPDATED = "subscription($media: ID!) { liveViewersUpdated(mediaId: $media) { id viewers media { id } } }"
LIVE_CHANNEL_VIEWERS_UPDATED = (
    "subscription($user: ID!) { liveChannelViewersUpdated(userId: $user) { id viewers user { id } } }"
)
LIVE_OBJECTS = "query($media: ID!) { media(id: $media) { liveViewers { id } uploader { liveChannelViewers { id } } } }"


async def test_live_viewer_objects_carry_the_ids_queries_give_them(api, socket):
    channel = await make_channel(api, api.http)
    media_id = channel.media[0]["id"]
    ids = (await api.ok(LIVE_OBJECTS, {"media": media_id}))["media"]
    media_operation = await socket.subscribe(LIVE_VIEWERS_UPDATED, {"media": media_id})
    channel_operation = await socket.subscribe(LIVE_CHANNEL_VIEWERS_UPDATED, {"user": channel.user["id"]})
    latest: dict[str, dict] = {}

    async def until(viewers: int) -> None:
        while [latest.get(field, {}).get("viewers") for field in ("media", "channel")] != [viewers, viewers]:
            message = await socket.receive()
            assert message["type"] == "next", message
            data = message["payload"]["data"]
            if message["id"] == media_operation:
                latest["media"] = data["liveViewersUpdated"]
            else:
                assert message["id"] == channel_operation
                latest["channel"] = data["liveChannelViewersUpdated"]

    await until(0)
    async with players(api) as group:
        group.start(media_id, 2)
        await until(2)
    assert latest["media"] == {"id": ids["liveViewers"]["id"], "viewers": 2, "media": {"id": media_id}}
    assert latest["channel"] == {
        "id": ids["uploader"]["liveChannelViewers"]["id"],
        "viewers": 2,
        "user": {"id": channel.user["id"]},
    }


STREAM_STATS_UPDATED = """
subscription($media: ID!) {
  playbackStatsUpdated(mediaId: $media) { __typename id total concurrent currentMinute { start count peak } }
}
"""
CHANNEL_STATS_UPDATED = """
subscription($user: ID!) {
  channelStatsUpdated(userId: $user) { __typename id total concurrent currentMinute { start count peak } }
}
"""
STATS_ID = "query($media: ID!) { playbackStats(mediaId: $media) { id } }"


async def stats_until(client, operation, field, **expected):
    """Pushes until one whose figures include `expected` (currentMinute's as count and peak); returns it."""
    deadline = time.monotonic() + 30
    seen = []
    while time.monotonic() < deadline:
        message = await client.receive(timeout=max(deadline - time.monotonic(), 0.1))
        assert message["id"] == operation, message
        assert message["type"] == "next", message
        stats = message["payload"]["data"][field]
        figures = {**stats, "count": stats["currentMinute"]["count"], "peak": stats["currentMinute"]["peak"]}
        seen.append(figures)
        if all(figures[name] == value for name, value in expected.items()):
            return stats
    raise AssertionError(f"never saw {expected}: {seen}")


async def test_playback_stats_updated_pushes_the_minute_peak_and_concurrent_viewers(api, socket):
    channel = await make_channel(api, api.http)
    media_id = channel.media[0]["id"]
    operation = await socket.subscribe(STREAM_STATS_UPDATED, {"media": media_id})
    first = await stats_until(socket, operation, "playbackStatsUpdated", total=0, concurrent=0, count=0, peak=0)
    assert first["__typename"] == "PlaybackStats"
    assert first["id"] == (await api.ok(STATS_ID, {"media": media_id}))["playbackStats"]["id"]

    async with players(api) as group:
        group.start(media_id, 2)
        # Within whichever minute it is: both sessions counted in it and watched together.
        live = await stats_until(socket, operation, "playbackStatsUpdated", total=2, concurrent=2, count=2, peak=2)
        assert live["id"] == first["id"]
    # Nobody reports any more: the sessions expire and the drop is pushed.
    await stats_until(socket, operation, "playbackStatsUpdated", total=2, concurrent=0)


async def test_channel_stats_updated_counts_every_stream_of_the_channel(api, socket):
    channel = await make_channel(api, api.http, media=2)
    operation = await socket.subscribe(CHANNEL_STATS_UPDATED, {"user": channel.user["id"]})
    await stats_until(socket, operation, "channelStatsUpdated", total=0, concurrent=0)

    async with players(api) as group:
        group.start(channel.media[0]["id"], 1)
        group.start(channel.media[1]["id"], 2)
        await stats_until(socket, operation, "channelStatsUpdated", total=3, concurrent=3, count=3, peak=3)
    await stats_until(socket, operation, "channelStatsUpdated", concurrent=0)


async def test_stats_of_unknown_media_or_users_are_not_found(socket):
    for document, variables in (
        (STREAM_STATS_UPDATED, {"media": "TWVkaWE6OTk5OTk5OTk5OQ"}),
        (CHANNEL_STATS_UPDATED, {"user": "VXNlcjo5OTk5OTk5OTk5"}),
    ):
        operation = await socket.subscribe(document, variables)
        message = await socket.receive()
        assert message["id"] == operation
        assert message["payload"]["errors"][0]["extensions"]["code"] == "NOT_FOUND"
        assert await socket.receive() == {"id": operation, "type": "complete"}


OWNER_STATS_UPDATED = """
subscription($media: ID!) {
  playbackStatsUpdated(mediaId: $media) {
    total concurrent watchSeconds averageViewDurationSeconds ...Minute
  }
}
fragment Minute on PlaybackStats { currentMinute { count watchSeconds uniqueViewers } }
"""
OWNER_CHANNEL_STATS_UPDATED = """
subscription($user: ID!) { channelStatsUpdated(userId: $user) { total concurrent watchSeconds } }
"""


async def connect_as(server, token):
    client = await WebSocketClient.connect(
        server.replace("http://", "ws://") + "/graphql", payload={"authorization": f"Bearer {token}"}
    )
    assert (await client.receive())["type"] == "connection_ack"
    return client


async def watch_time_pushes(client, fields, *, count):
    """By operation: pushes whose total and concurrent viewers stay at 2, until every operation
    (`fields` maps each to its root field) has `count` of them: each one moved by watch time."""
    pushes = {operation: [] for operation in fields}
    deadline = time.monotonic() + 60
    while min(len(received) for received in pushes.values()) < count:
        message = await client.receive(timeout=max(deadline - time.monotonic(), 0.1))
        assert message["type"] == "next", message
        stats = message["payload"]["data"][fields[message["id"]]]
        if stats["total"] == 2 and stats["concurrent"] == 2:
            pushes[message["id"]].append(stats)
    return pushes


async def test_the_owners_stats_subscription_carries_watch_time_as_it_grows(server, api, socket):
    channel = await make_channel(api, api.http)
    media_id = channel.media[0]["id"]
    owner = await connect_as(server, channel.token)
    try:
        stream = await owner.subscribe(OWNER_STATS_UPDATED, {"media": media_id})
        whole = await owner.subscribe(OWNER_CHANNEL_STATS_UPDATED, {"user": channel.user["id"]})
        # Someone else's public subscription of the same stream, shared as before.
        public = await socket.subscribe(STREAM_STATS_UPDATED, {"media": media_id})
        async with players(api) as group:
            group.start(media_id, 2)
            # Two sessions keep playing: neither the total nor the viewers change, yet watch time is pushed
            # as it grows (once per roll-up interval at least), with the minute's own figures.
            pushes = await watch_time_pushes(
                owner, {stream: "playbackStatsUpdated", whole: "channelStatsUpdated"}, count=3
            )
        for operation in (stream, whole):
            watched = [push["watchSeconds"] for push in pushes[operation]]
            assert watched == sorted(watched), watched
            assert len(set(watched)) == len(watched), "a push moved by nothing"
        last = pushes[stream][-1]
        assert last["averageViewDurationSeconds"] == last["watchSeconds"] / 2
        # A minute that has just begun has seen no heartbeat yet (the refresh noticed it first): the
        # sessions count in it from their next heartbeat on, viewers and watch time together.
        minutes = [push["currentMinute"] for push in pushes[stream]]
        assert all(minute["uniqueViewers"] >= 1 for minute in minutes if minute["count"] or minute["watchSeconds"])
        assert any(minute["uniqueViewers"] >= 1 and minute["watchSeconds"] > 0 for minute in minutes), minutes
        # The public subscriber only ever got public figures, and no push repeating the last one.
        seen = []
        with contextlib.suppress(TimeoutError):
            while True:
                message = await socket.receive(timeout=0.5)
                assert message["id"] == public
                seen.append(message["payload"]["data"]["playbackStatsUpdated"])
        assert seen
        assert all("watchSeconds" not in stats for stats in seen)
        assert all(before != after for before, after in itertools.pairwise(seen))
    finally:
        await owner.close()


async def test_watch_time_pushes_are_forbidden_to_anyone_but_the_owner(server, api):
    channel = await make_channel(api, api.http)
    viewer_token, _ = await create_user(api)
    for token in (viewer_token, None):
        client = (
            await connect_as(server, token)
            if token
            else await WebSocketClient.connect(server.replace("http://", "ws://") + "/graphql")
        )
        try:
            if token is None:
                assert (await client.receive())["type"] == "connection_ack"
            for document, variables in (
                (OWNER_STATS_UPDATED, {"media": channel.media[0]["id"]}),
                (OWNER_CHANNEL_STATS_UPDATED, {"user": channel.user["id"]}),
            ):
                operation = await client.subscribe(document, variables)
                message = await client.receive()
                assert message["id"] == operation
                assert {error["extensions"]["code"] for error in message["payload"]["errors"]} == {"FORBIDDEN"}
                # The public figures arrive; the owner's are null.
                [stats] = message["payload"]["data"].values()
                assert stats["total"] == 0
                assert stats["watchSeconds"] is None
        finally:
            await client.close()
