from __future__ import annotations

import httpx
import pytest
import websockets

from tests.support.factories import create_user, unique_name, upload
from tests.support.graphql import WebSocketClient

ME = "query { me { username } }"
MEDIA_UPLOADED = "subscription($tags: [String!]) { mediaUploaded(tags: $tags) { title tags uploader { username } } }"


@pytest.fixture(scope="module")
def server(live_servers) -> str:
    return live_servers.start("--no-workers")


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/graphql"


async def test_connection_init_token_authenticates_operations(server, gql):
    token, user = await create_user(gql)
    client = await WebSocketClient.connect(ws_url(server), payload={"authorization": f"Bearer {token}"})
    try:
        assert (await client.receive())["type"] == "connection_ack"
        operation = await client.subscribe(ME)
        message = await client.receive()
        assert message == {"id": operation, "type": "next", "payload": {"data": {"me": {"username": user["username"]}}}}
        assert (await client.receive())["type"] == "complete"
    finally:
        await client.close()


async def test_anonymous_connection_sees_no_viewer(server):
    client = await WebSocketClient.connect(ws_url(server))
    try:
        assert (await client.receive())["type"] == "connection_ack"
        await client.subscribe(ME)
        assert (await client.receive())["payload"] == {"data": {"me": None}}
    finally:
        await client.close()


async def test_bad_token_in_connection_init_is_refused(server):
    client = await WebSocketClient.connect(ws_url(server), payload={"authorization": "Bearer forged"})
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await client.receive()
    assert closed.value.rcvd.code == 4403


async def test_media_uploaded_subscription_receives_uploads_from_another_process(server, live_servers, gql):
    other = live_servers.start("--no-workers")
    tag = unique_name("live")
    token, user = await create_user(gql)
    client = await WebSocketClient.connect(ws_url(server))
    try:
        assert (await client.receive())["type"] == "connection_ack"
        operation = await client.subscribe(MEDIA_UPLOADED, {"tags": [tag]})
        async with httpx.AsyncClient(base_url=other) as http:
            await upload(http, token=token, title="Elsewhere", tags=["unrelated"])
            message = await _upload_until_delivered(client, http, token=token, tag=tag)
        assert message["id"] == operation
        assert message["payload"]["data"]["mediaUploaded"] == {
            "title": "Live one",
            "tags": [tag],
            "uploader": {"username": user["username"]},
        }
    finally:
        await client.close()


async def _upload_until_delivered(client, http, *, token, tag):
    # The server subscribes to Redis asynchronously after `subscribe`: an upload
    # landing before that is legitimately missed, so retry a bounded number of times.
    for _ in range(20):
        await upload(http, token=token, title="Live one", tags=[tag])
        try:
            return await client.receive(timeout=1)
        except TimeoutError:
            continue
    raise AssertionError("no mediaUploaded event arrived")


async def test_invalid_subscription_arguments_get_an_error_code(server):
    client = await WebSocketClient.connect(ws_url(server))
    try:
        assert (await client.receive())["type"] == "connection_ack"
        await client.subscribe(MEDIA_UPLOADED, {"tags": ["not a tag"]})
        message = await client.receive()
        assert message["type"] == "next"
        assert message["payload"]["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    finally:
        await client.close()
