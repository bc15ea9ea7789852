"""Demo traffic: every kind of activity goes through the public API, lands, and stops when asked."""

from __future__ import annotations

import asyncio
import random
import time

from mediagraph.demo import DemoClient
from mediagraph.demo.traffic import Audience, Traffic, TrafficOptions
from mediagraph.workers import playback as playback_worker
from tests.support.factories import create_media, create_user, define_leaderboard, service_token

KINDS = {"views", "likes", "unlikes", "comments", "posts", "scores", "uploads", "heartbeats"}
MEDIA = "query($id: ID!) { media(id: $id) { viewCount commentCount playbackStats { total } } }"
POSTS = "query($u: String!) { user(username: $u) { posts(first: 100) { edges { node { id } } } } }"
BOARD = "query($name: String!) { leaderboard(name: $name) { size } }"
CHANNEL_WATCH = "query($user: ID!) { channelStats(userId: $user) { watchSeconds plays { edges { node { id } } } } }"


async def roll_up_everything(services) -> None:
    while await playback_worker.roll_up_once(services, everything=True):
        pass


async def test_traffic_acts_through_the_api_until_stopped(gql, http, settings, services):
    users = [await create_user(gql) for _ in range(2)]
    media = [await create_media(http, token=users[0][0]) for _ in range(3)]
    board = await define_leaderboard(gql, token=service_token(settings), operator="INCREMENT")
    audience = Audience(
        accounts=[(token, user["id"]) for token, user in users],
        media=[item["id"] for item in media],
        appeal=[1.0, 1.0, 1.0],
        board=board["name"],
    )
    options = TrafficOptions(actions_per_second=200, players=2, report_every_seconds=3600)
    traffic = Traffic(DemoClient(http), settings, options, audience, random.Random(5))
    stopped = asyncio.Event()
    running = asyncio.create_task(traffic.run(stopped))
    deadline = time.monotonic() + 180
    # Every kind of activity, and players far enough into their sessions for watch time (each
    # session lasts at least half a minute: three heartbeats from two players mean a second one).
    while not (set(traffic.done) >= KINDS and traffic.done["heartbeats"] >= 3):
        assert time.monotonic() < deadline, f"only {traffic.done} after 3 minutes"
        assert not running.done(), running
        await asyncio.sleep(0.2)
    stopped.set()
    await asyncio.wait_for(running, 30)

    assert not traffic.refused, traffic.refused
    # Uploads joined the audience; every view came from a new anonymous viewer, so each counted.
    assert len(audience.media) == 3 + traffic.done["uploads"]
    counts = [(await gql.ok(MEDIA, {"id": media_id}))["media"] for media_id in audience.media]
    assert sum(item["viewCount"] for item in counts) == traffic.done["views"]
    assert sum(item["commentCount"] for item in counts) == traffic.done["comments"]
    assert sum(item["playbackStats"]["total"] for item in counts) >= 1
    posts = [(await gql.ok(POSTS, {"u": user["username"]}))["user"]["posts"]["edges"] for _, user in users]
    assert sum(len(edges) for edges in posts) == traffic.done["posts"]
    assert (await gql.ok(BOARD, {"name": board["name"]}))["leaderboard"]["size"] >= 1

    # The roll-up turns the players' sessions into plays with watch time, which each channel's owner sees.
    await roll_up_everything(services)
    watched, plays = 0.0, 0
    for token, user in users:
        stats = (await gql.ok(CHANNEL_WATCH, {"user": user["id"]}, token=token))["channelStats"]
        watched += stats["watchSeconds"]
        plays += len(stats["plays"]["edges"])
    assert plays >= 1
    assert watched >= 5.0
