"""`hotMediaUpdated`: today's top 10 pushed as it changes, over a real websocket, from a server
on databases of its own (the top ranks every media created today)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.support.databases import private_databases
from tests.support.factories import add_comment, create_media, create_user, record_views
from tests.support.graphql import GraphQLClient, WebSocketClient

HOT_UPDATED = """
subscription($date: Date) {
  hotMediaUpdated(date: $date) { __typename id date final entries { rank score media { id title likeCount } } }
}
"""
HOT_NOW = "query { hotMedia { id entries { score media { id } } } }"
LIKE = "mutation($id: ID!) { likeMedia(mediaId: $id) { likeCount } }"


@pytest.fixture(scope="module")
def server(live_servers, settings) -> str:
    # Workers on: the hot worker applies engagement events, the views worker flushes views into them.
    with private_databases(settings, "hot") as environment:
        yield live_servers.start(ready_within=180, **environment)
        live_servers.stop_all()


@pytest.fixture
async def api(server):
    async with httpx.AsyncClient(base_url=server, timeout=30) as http:
        yield http


@pytest.fixture
async def socket(server):
    client = await WebSocketClient.connect(server.replace("http://", "ws://") + "/graphql")
    assert (await client.receive())["type"] == "connection_ack"
    yield client
    await client.close()


async def next_day(client: WebSocketClient, operation: str, *, within: float = 30) -> dict:
    message = await client.receive(within)
    assert message["id"] == operation, message
    assert message["type"] == "next", message
    assert "errors" not in message["payload"], message
    return message["payload"]["data"]["hotMediaUpdated"]  # type: ignore[no-any-return]


async def day_ranking(client: WebSocketClient, operation: str, expected: list[tuple[str, float]]) -> dict:
    """Pushes until the day's entries are `expected` (media id, score), best first; returns that push."""
    deadline = time.monotonic() + 60
    seen = []
    while time.monotonic() < deadline:
        day = await next_day(client, operation, within=max(deadline - time.monotonic(), 0.1))
        ranking = [(entry["media"]["id"], entry["score"]) for entry in day["entries"]]
        seen.append(ranking)
        if ranking == expected:
            return day
    raise AssertionError(f"never saw {expected}: {seen}")


async def test_the_top_is_pushed_at_once_and_again_as_likes_comments_and_views_reorder_it(socket, api):
    gql = GraphQLClient(api)
    operation = await socket.subscribe(HOT_UPDATED)
    first = await next_day(socket, operation)
    today = datetime.now(UTC).date().isoformat()
    assert (first["__typename"], first["date"], first["final"], first["entries"]) == ("HotMediaDay", today, False, [])
    assert first["id"] == (await gql.ok(HOT_NOW))["hotMedia"]["id"]

    token, _ = await create_user(gql)
    liked = await create_media(api, token=token, title="Liked harbor")
    discussed = await create_media(api, token=token, title="Discussed harbor")
    await gql.ok(LIKE, {"id": liked["id"]}, token=token)
    pushed = await day_ranking(socket, operation, [(liked["id"], 3.0)])
    assert pushed["entries"][0] == {
        "rank": 1,
        "score": 3.0,
        "media": {"id": liked["id"], "title": "Liked harbor", "likeCount": 1},
    }
    assert pushed["id"] == first["id"]

    for text in ("Where is this?", "Lovely light"):
        await add_comment(gql, token=token, media_id=discussed["id"], content=text)
    await day_ranking(socket, operation, [(discussed["id"], 4.0), (liked["id"], 3.0)])

    # Views reach the score once the views worker flushes them (within a second or two).
    await record_views(api, media_id=liked["id"], count=2)
    await day_ranking(socket, operation, [(liked["id"], 5.0), (discussed["id"], 4.0)])


async def test_a_day_no_longer_kept_is_refused(socket):
    long_ago = (datetime.now(UTC).date() - timedelta(days=30)).isoformat()
    operation = await socket.subscribe(HOT_UPDATED, {"date": long_ago})
    message = await socket.receive()
    assert message["id"] == operation, message
    assert message["payload"]["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


async def test_a_named_date_is_the_same_day_as_today(socket, server):
    today = datetime.now(UTC).date().isoformat()
    operation = await socket.subscribe(HOT_UPDATED, {"date": today})
    named = await next_day(socket, operation)
    async with httpx.AsyncClient(base_url=server) as api:
        assert named["id"] == (await GraphQLClient(api).ok(HOT_NOW))["hotMedia"]["id"]
    assert named["date"] == today
