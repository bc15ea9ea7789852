"""`newsfeedUpdated` over a real websocket, against a live server and a real fan-out worker process."""

from __future__ import annotations

import httpx
import pytest

from tests.support.apps import private_prefix
from tests.support.factories import create_post, create_user, follow, followed_author
from tests.support.graphql import GraphQLClient, WebSocketClient

NEWSFEED_UPDATED = "subscription { newsfeedUpdated { postId post { id text author { username } } } }"


@pytest.fixture(scope="module")
async def live(settings, live_servers):
    """A server and a worker process on a private prefix; two followers make a celebrity."""
    env = {"MEDIAGRAPH_REDIS_PREFIX": private_prefix(settings, "live"), "MEDIAGRAPH_CELEBRITY_FOLLOWERS": "2"}
    server = live_servers.start("--no-workers", **env)
    worker = live_servers.spawn("worker", "fanout", **env)
    async with httpx.AsyncClient(base_url=server) as http:
        yield server.replace("http://", "ws://") + "/graphql", GraphQLClient(http)
    worker.terminate()
    worker.wait(timeout=20)


async def _subscribed(url, token):
    client = await WebSocketClient.connect(url, payload={"authorization": f"Bearer {token}"})
    assert (await client.receive())["type"] == "connection_ack"
    operation = await client.subscribe(NEWSFEED_UPDATED)
    return client, operation


async def _post_until_pushed(client, gql, *, token, author):
    """Posts until one arrives: the server subscribes to Redis a moment after `subscribe`,
    and a post landing before that is legitimately missed. Pushes of other authors (earlier
    retries) are passed over."""
    for attempt in range(30):
        posted = await create_post(gql, token=token, text=f"live {attempt}")
        while True:
            try:
                message = await client.receive(timeout=2)
            except TimeoutError:
                break
            update = message["payload"]["data"]["newsfeedUpdated"]
            if update["post"]["author"]["username"] == author["username"]:
                return posted, update
    raise AssertionError(f"no newsfeedUpdated push for {author['username']}")


async def test_new_posts_of_followed_users_are_pushed_to_the_viewer(live):
    url, gql = live
    viewer_token, _ = await create_user(gql)
    friend_token, friend = await create_user(gql)
    stranger_token, stranger = await create_user(gql)
    await follow(gql, token=viewer_token, user_id=friend["id"])
    client, operation = await _subscribed(url, viewer_token)
    try:
        await create_post(gql, token=stranger_token, text="nobody follows me")
        _, update = await _post_until_pushed(client, gql, token=friend_token, author=friend)
        assert update["postId"] == update["post"]["id"]
        assert update["post"]["author"] == {"username": friend["username"]}
        # A push is a post that is now in the feed.
        feed = (await gql.ok("query { newsfeed(first: 50) { edges { node { id } } } }", token=viewer_token))["newsfeed"]
        assert update["postId"] in [edge["node"]["id"] for edge in feed["edges"]]
        last = await create_post(gql, token=friend_token, text="the last one")
        while True:
            message = await client.receive(timeout=30)
            assert message["id"] == operation
            pushed = message["payload"]["data"]["newsfeedUpdated"]
            assert pushed["post"]["author"]["username"] != stranger["username"]
            if pushed["postId"] == last:
                break
    finally:
        await client.close()


async def test_celebrity_posts_are_pushed_though_not_fanned_out(live):
    url, gql = live
    (star_token, star), [(viewer_token, _), _] = await followed_author(gql, followers=2)
    client, _ = await _subscribed(url, viewer_token)
    try:
        _, update = await _post_until_pushed(client, gql, token=star_token, author=star)
        assert update["post"]["author"] == {"username": star["username"]}
    finally:
        await client.close()


async def test_following_a_celebrity_while_subscribed_starts_their_pushes(live):
    url, gql = live
    (star_token, star), _ = await followed_author(gql, followers=2)
    viewer_token, _ = await create_user(gql)
    client, _ = await _subscribed(url, viewer_token)
    try:
        await follow(gql, token=viewer_token, user_id=star["id"])
        _, update = await _post_until_pushed(client, gql, token=star_token, author=star)
        assert update["post"]["author"] == {"username": star["username"]}
    finally:
        await client.close()


async def test_newsfeed_updated_needs_a_login(live):
    url, _ = live
    client = await WebSocketClient.connect(url)
    try:
        assert (await client.receive())["type"] == "connection_ack"
        await client.subscribe(NEWSFEED_UPDATED)
        message = await client.receive()
        errors = message["payload"]["errors"] if message["type"] == "next" else message["payload"]
        assert errors[0]["extensions"]["code"] == "UNAUTHENTICATED"
    finally:
        await client.close()
