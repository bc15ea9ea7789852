"""`viewCount` subscriptions over a real graphql-transport-ws client against running servers."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.support.factories import create_media, create_user, record_views
from tests.support.graphql import WebSocketClient
from tests.support.servers import PrivateRedis

VIEW_COUNT = "subscription($id: ID!) { viewCount(mediaId: $id) { mediaId viewCount } }"
COUNT = "query($id: ID!) { media(id: $id) { viewCount } }"


@pytest.fixture(scope="module")
def two_servers(live_servers) -> tuple[str, str]:
    return live_servers.start("--no-workers"), live_servers.start("--no-workers")


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/graphql"


async def _subscribe(base: str, media_id: str) -> tuple[WebSocketClient, str]:
    client = await WebSocketClient.connect(ws_url(base))
    assert (await client.receive())["type"] == "connection_ack"
    operation = await client.subscribe(VIEW_COUNT, {"id": media_id})
    return client, operation


async def _next_count(client: WebSocketClient, operation: str, timeout: float = 10) -> int:  # noqa: ASYNC109
    message = await client.receive(timeout)
    assert message["id"] == operation, message
    assert message["type"] == "next", message
    assert "errors" not in message["payload"], message
    return message["payload"]["data"]["viewCount"]["viewCount"]  # type: ignore[no-any-return]


async def _counts_until(client, operation, final, *, within=30.0):
    seen = []
    deadline = time.monotonic() + within
    while not seen or seen[-1] != final:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"never saw {final}: {seen}")
        seen.append(await _next_count(client, operation, timeout=remaining))
    return seen


async def test_a_view_on_one_server_reaches_a_subscriber_on_another(two_servers, http, gql):
    first, second = two_servers
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    client, operation = await _subscribe(first, media["id"])
    try:
        initial = await client.receive()
        assert initial["payload"]["data"]["viewCount"] == {"mediaId": media["id"], "viewCount": 0}
        async with httpx.AsyncClient(base_url=second) as other:
            await record_views(other, media_id=media["id"], count=1)
            assert await _next_count(client, operation) == 1
            await record_views(other, media_id=media["id"], count=2)
            assert (await _counts_until(client, operation, 3))[-1] == 3
    finally:
        await client.close()


async def test_a_burst_is_coalesced_to_a_few_pushes_ending_on_the_final_count(two_servers, http, gql, settings):
    first, second = two_servers
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    client, operation = await _subscribe(first, media["id"])
    try:
        assert await _next_count(client, operation) == 0
        started = time.monotonic()
        async with httpx.AsyncClient(base_url=second) as other:
            views = await record_views(other, media_id=media["id"], count=300, concurrency=32)
        pushes = await _counts_until(client, operation, views)
        elapsed = time.monotonic() - started
    finally:
        await client.close()
    assert views == 300
    assert pushes == sorted(pushes)
    # At most one push per interval reaches a subscriber, however many views arrive
    # (how many intervals the burst spans depends on how busy the machine is).
    assert len(pushes) <= elapsed / settings.view_push_interval_seconds + 2, (len(pushes), elapsed)
    assert len(pushes) < views


async def test_subscribing_to_a_missing_media_is_an_error(two_servers):
    client, operation = await _subscribe(two_servers[0], "TWVkaWE6OTk5OTk5OTk5")
    try:
        message = await client.receive()
        assert message["id"] == operation
        assert message["payload"]["errors"][0]["extensions"]["code"] == "NOT_FOUND"
    finally:
        await client.close()


async def test_subscriptions_resume_by_themselves_after_redis_restarts(live_servers, http, gql, tmp_path):
    redis = PrivateRedis(tmp_path / "redis")
    redis.start()
    try:
        server = live_servers.start("--no-workers", MEDIAGRAPH_REDIS_URL=redis.url)
        token, _ = await create_user(gql)
        media = await create_media(http, token=token)
        client, operation = await _subscribe(server, media["id"])
        try:
            assert await _next_count(client, operation) == 0
            async with httpx.AsyncClient(base_url=server) as api:
                await record_views(api, media_id=media["id"], count=2)
                assert await _counts_until(client, operation, 2)

                redis.stop()
                down = await api.post("/graphql", json={"query": COUNT, "variables": {"id": media["id"]}})
                assert down.json()["data"]["media"]["viewCount"] == 0  # what PostgreSQL holds
                redis.start()  # empty: the unflushed views are gone with it

                count = await _view_until_pushed(client, operation, api, media["id"])
                shown = await api.post("/graphql", json={"query": COUNT, "variables": {"id": media["id"]}})
                assert count == shown.json()["data"]["media"]["viewCount"] > 0
        finally:
            await client.close()
    finally:
        redis.stop()


async def _view_until_pushed(client, operation, api, media_id):
    # The server re-subscribes with backoff after Redis comes back; until then a view's
    # push is legitimately missed, so keep viewing, a bounded number of times.
    for attempt in range(60):
        response = await api.post(
            "/graphql",
            json={
                "query": "mutation($id: ID!) { recordView(mediaId: $id) { counted } }",
                "variables": {"id": media_id},
            },
            headers={"user-agent": f"after-restart-{attempt}"},
        )
        if response.json().get("errors"):
            await asyncio.sleep(0.2)  # Redis not reachable yet from this server
            continue
        try:
            return await _next_count(client, operation, timeout=1)
        except TimeoutError:
            continue
    raise AssertionError("no push arrived after Redis restarted")
