"""`mediaCounts`: live view, like and comment counts of a list of media, over a real websocket."""

from __future__ import annotations

import time

import httpx
import pytest

from mediagraph.ids import to_global_id
from mediagraph.resolvers.media.counts import MAX_WATCHED_MEDIA
from mediagraph.serving.schema import build_schema
from mediagraph.serving.sharing import SharedStreams
from tests.support.factories import add_comment, create_media, create_user, record_views
from tests.support.graphql import WebSocketClient

MEDIA_COUNTS = """
subscription($ids: [ID!]!) { mediaCounts(mediaIds: $ids) { __typename id title viewCount likeCount commentCount } }
"""
MEDIA_COUNTS_WITH_VIEWER = "subscription($ids: [ID!]!) { mediaCounts(mediaIds: $ids) { id viewerHasLiked } }"
LIKE = "mutation($id: ID!) { likeMedia(mediaId: $id) { likeCount } }"
DELETE_COMMENT = "mutation($id: ID!) { deleteComment(id: $id) { removed } }"


@pytest.fixture(scope="module")
def server(live_servers) -> str:
    return live_servers.start("--no-workers", ready_within=180)


@pytest.fixture
async def socket(server):
    client = await WebSocketClient.connect(server.replace("http://", "ws://") + "/graphql")
    assert (await client.receive())["type"] == "connection_ack"
    yield client
    await client.close()


async def next_media(client: WebSocketClient, operation: str, *, within: float = 30) -> dict:
    message = await client.receive(within)
    assert message["id"] == operation, message
    assert message["type"] == "next", message
    assert "errors" not in message["payload"], message
    return message["payload"]["data"]["mediaCounts"]  # type: ignore[no-any-return]


async def push_showing(client: WebSocketClient, operation: str, media_id: str, **expected: int) -> dict:
    """Pushes until one shows `media_id` with the `expected` counts; returns it."""
    deadline = time.monotonic() + 30
    seen = []
    while time.monotonic() < deadline:
        media = await next_media(client, operation, within=max(deadline - time.monotonic(), 0.1))
        seen.append(media)
        if media["id"] == media_id and all(media[name] == value for name, value in expected.items()):
            return media
    raise AssertionError(f"never saw {media_id} with {expected}: {seen}")


async def first_error(client: WebSocketClient, variables: dict) -> dict:
    operation = await client.subscribe(MEDIA_COUNTS, variables)
    message = await client.receive()
    assert message["id"] == operation, message
    if message["type"] == "error":
        return message["payload"][0]  # type: ignore[no-any-return]
    assert message["type"] == "next", message
    assert (await client.receive()) == {"id": operation, "type": "complete"}
    return message["payload"]["errors"][0]  # type: ignore[no-any-return]


async def test_each_media_comes_at_once_then_again_when_views_likes_or_comments_move(socket, http, gql):
    token, _ = await create_user(gql)
    watched = [await create_media(http, token=token, title=f"Counted {n}") for n in range(2)]
    first, second = (media["id"] for media in watched)
    operation = await socket.subscribe(MEDIA_COUNTS, {"ids": [first, second]})

    initial = [await next_media(socket, operation) for _ in watched]
    assert sorted(initial, key=lambda media: media["title"]) == [
        {
            "__typename": "Media",
            "id": media["id"],
            "title": media["title"],
            "viewCount": 0,
            "likeCount": 0,
            "commentCount": 0,
        }
        for media in watched
    ]

    await record_views(http, media_id=second, count=2)
    assert (await push_showing(socket, operation, second, viewCount=2))["likeCount"] == 0

    await gql.ok(LIKE, {"id": first}, token=token)
    assert (await push_showing(socket, operation, first, likeCount=1))["viewCount"] == 0

    comment = await add_comment(gql, token=token, media_id=second)
    await push_showing(socket, operation, second, viewCount=2, commentCount=1)
    await gql.ok(DELETE_COMMENT, {"id": comment["id"]}, token=token)
    await push_showing(socket, operation, second, commentCount=0)


async def test_a_like_that_changes_nothing_pushes_nothing(socket, http, gql):
    token, _ = await create_user(gql)
    liked, viewed = (await create_media(http, token=token), await create_media(http, token=token))
    operation = await socket.subscribe(MEDIA_COUNTS, {"ids": [liked["id"], viewed["id"]]})
    await next_media(socket, operation)
    await next_media(socket, operation)
    await gql.ok(LIKE, {"id": liked["id"]}, token=token)
    await push_showing(socket, operation, liked["id"], likeCount=1)

    await gql.ok(LIKE, {"id": liked["id"]}, token=token)  # liked already: no change
    await record_views(http, media_id=viewed["id"], count=1)
    # The next push is the view; the repeated like made none.
    assert await next_media(socket, operation) == {
        "__typename": "Media",
        "id": viewed["id"],
        "title": viewed["title"],
        "viewCount": 1,
        "likeCount": 0,
        "commentCount": 0,
    }


async def test_unknown_too_many_or_no_media_are_coded_errors(socket, http, gql):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    unknown = to_global_id("Media", 999_999_999)

    missing = await first_error(socket, {"ids": [media["id"], unknown]})
    assert missing["extensions"] == {"code": "NOT_FOUND", "argument": "mediaIds"}
    assert unknown in missing["message"]

    too_many = [to_global_id("Media", n) for n in range(1, MAX_WATCHED_MEDIA + 2)]
    assert (await first_error(socket, {"ids": too_many}))["extensions"]["code"] == "BAD_USER_INPUT"
    assert (await first_error(socket, {"ids": []}))["extensions"]["code"] == "BAD_USER_INPUT"
    assert (await first_error(socket, {"ids": ["not-an-id"]}))["extensions"]["code"] == "BAD_USER_INPUT"


async def test_two_sockets_watching_the_same_media_receive_the_same_pushes(server, http, gql):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    clients = [await WebSocketClient.connect(server.replace("http://", "ws://") + "/graphql") for _ in range(2)]
    try:
        operations = []
        for client in clients:
            assert (await client.receive())["type"] == "connection_ack"
            operations.append(await client.subscribe(MEDIA_COUNTS, {"ids": [media["id"]]}))
        for client, operation in zip(clients, operations, strict=True):
            assert (await next_media(client, operation))["viewCount"] == 0
        async with httpx.AsyncClient(base_url=server) as api:
            await record_views(api, media_id=media["id"], count=3)
        for client, operation in zip(clients, operations, strict=True):
            await push_showing(client, operation, media["id"], viewCount=3)
    finally:
        for client in clients:
            await client.close()


def test_media_counts_share_one_execution_unless_a_field_depends_on_the_viewer(settings):
    schema, streams = build_schema(settings), SharedStreams()
    variables = {"ids": [to_global_id("Media", 1)]}
    assert streams.key_for(schema, MEDIA_COUNTS, None, variables) is not None
    assert streams.key_for(schema, MEDIA_COUNTS_WITH_VIEWER, None, variables) is None
