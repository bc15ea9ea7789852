"""`commentAdded(mediaId:)` over graphql-transport-ws against a real server process."""

from __future__ import annotations

import pytest

from mediagraph.ids import to_global_id
from tests.support.factories import add_comment, create_media, create_user
from tests.support.graphql import WebSocketClient

COMMENT_ADDED = """
subscription($mediaId: ID!) {
  commentAdded(mediaId: $mediaId) { id content depth writerNickname writer { username } parent { id } media { id } }
}
"""


@pytest.fixture(scope="module")
def server(live_servers) -> str:
    return live_servers.start("--no-workers")


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/graphql"


async def subscribed(server: str, media_id: str) -> tuple[WebSocketClient, str]:
    client = await WebSocketClient.connect(ws_url(server))
    assert (await client.receive())["type"] == "connection_ack"
    return client, await client.subscribe(COMMENT_ADDED, {"mediaId": media_id})


async def comment_until_delivered(gql, client, *, token, media_id, content, parent_id=None):
    # The server subscribes to Redis asynchronously after `subscribe`: a comment made
    # before that is legitimately missed, so comment again a bounded number of times.
    for _ in range(20):
        comment = await add_comment(gql, token=token, media_id=media_id, content=content, parent_id=parent_id)
        try:
            message = await client.receive(timeout=1)
        except TimeoutError:
            continue
        return comment, message
    raise AssertionError("no commentAdded event arrived")


async def test_comment_added_delivers_comments_made_through_another_process(server, http, gql):
    token, user = await create_user(gql, nickname="Live writer")
    media = await create_media(http, token=token)
    other = await create_media(http, token=token)
    client, operation = await subscribed(server, media["id"])
    try:
        await add_comment(gql, token=token, media_id=other["id"], content="elsewhere")
        comment, message = await comment_until_delivered(
            gql, client, token=token, media_id=media["id"], content="hello"
        )
        assert message["id"] == operation
        assert message["payload"]["data"]["commentAdded"] == {
            "id": comment["id"],
            "content": "hello",
            "depth": 1,
            "writerNickname": "Live writer",
            "writer": {"username": user["username"]},
            "parent": None,
            "media": {"id": media["id"]},
        }
        reply = await add_comment(gql, token=token, media_id=media["id"], content="a reply", parent_id=comment["id"])
        delivered = (await client.receive())["payload"]["data"]["commentAdded"]
        assert (delivered["id"], delivered["depth"], delivered["parent"]) == (reply["id"], 2, {"id": comment["id"]})
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("media_id", "code"), [("not-an-id", "BAD_USER_INPUT"), (to_global_id("Media", 4242), "NOT_FOUND")]
)
async def test_comment_added_refuses_bad_or_unknown_media(server, media_id, code):
    client, _ = await subscribed(server, media_id)
    try:
        message = await client.receive()
        assert message["type"] == "next"
        assert message["payload"]["errors"][0]["extensions"]["code"] == code
    finally:
        await client.close()
