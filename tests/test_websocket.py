from __future__ import annotations

import httpx
import pytest
import websockets
from sqlalchemy import text

from mediagraph.ids import decode_id
from tests.support.factories import create_media, create_user, record_views, unique_name, upload
from tests.support.graphql import LegacyWebSocketClient, WebSocketClient

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


VIEW_COUNT = "subscription($id: ID!) { viewCount(mediaId: $id) { viewCount media { id viewCount } } }"
COUNT_OVER = "query($id: ID!) { media(id: $id) { viewCount } }"


async def _legacy(url: str, **payload: str) -> LegacyWebSocketClient:
    client = await LegacyWebSocketClient.connect(url, payload=payload or None)
    assert (await client.receive())["type"] == "connection_ack"
    return client


async def test_legacy_graphql_ws_authenticates_in_connection_init_and_runs_queries(server, gql):
    token, user = await create_user(gql)
    client = await _legacy(ws_url(server), authorization=f"Bearer {token}")
    try:
        operation = await client.start(ME)
        assert await client.receive() == {
            "type": "data",
            "id": operation,
            "payload": {"data": {"me": {"username": user["username"]}}},
        }
        assert await client.receive() == {"type": "complete", "id": operation}
    finally:
        await client.close()


async def test_legacy_graphql_ws_refuses_a_bad_token_with_its_code(server):
    client = await LegacyWebSocketClient.connect(ws_url(server), payload={"authorization": "Bearer forged"})
    message = await client.receive()
    assert message["type"] == "connection_error"
    assert message["payload"]["code"] == "UNAUTHENTICATED"
    with pytest.raises(websockets.ConnectionClosed):
        await client.receive()


async def test_legacy_graphql_ws_gives_the_same_error_codes(server):
    client = await _legacy(ws_url(server))
    try:
        operation = await client.start(MEDIA_UPLOADED, {"tags": ["not a tag"]})
        message = await client.receive()
        assert message["type"] == "data"
        assert message["payload"]["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
        assert await client.receive() == {"type": "complete", "id": operation}

        operation = await client.start(VIEW_COUNT, {"id": "TWVkaWE6OTk5OTk5OTk5OQ"})
        message = await client.receive()
        assert message["payload"]["errors"][0]["extensions"]["code"] == "NOT_FOUND"
        assert await client.receive() == {"type": "complete", "id": operation}

        operation = await client.start("subscription { noSuchField }")
        message = await client.receive()
        assert message["type"] == "error"
        assert message["id"] == operation
        assert message["payload"]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    finally:
        await client.close()


async def test_legacy_graphql_ws_pushes_like_graphql_transport_ws_and_stops_on_request(server, http, gql):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    legacy = await _legacy(ws_url(server))
    modern = await WebSocketClient.connect(ws_url(server))
    try:
        assert (await modern.receive())["type"] == "connection_ack"
        legacy_operation = await legacy.start(VIEW_COUNT, {"id": media["id"]})
        await modern.subscribe(VIEW_COUNT, {"id": media["id"]})
        first = {"viewCount": 0, "media": {"id": media["id"], "viewCount": 0}}
        assert await legacy.receive() == {"type": "data", "id": legacy_operation, "payload": {"data": {"viewCount": first}}}
        assert (await modern.receive())["payload"] == {"data": {"viewCount": first}}
        async with httpx.AsyncClient(base_url=server) as other:
            await record_views(other, media_id=media["id"], count=1)
        pushed = {"viewCount": 1, "media": {"id": media["id"], "viewCount": 1}}
        assert await legacy.receive() == {"type": "data", "id": legacy_operation, "payload": {"data": {"viewCount": pushed}}}
        assert (await modern.receive())["payload"] == {"data": {"viewCount": pushed}}
        await legacy.stop(legacy_operation)
        assert await legacy.receive() == {"type": "complete", "id": legacy_operation}
    finally:
        await legacy.close()
        await modern.close()


async def test_a_legacy_socket_that_never_initialises_is_closed(server):
    client = await LegacyWebSocketClient.connect(ws_url(server), init=False)
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await client.receive(timeout=30)
    assert closed.value.rcvd.code == 4408


async def test_internal_errors_are_masked_on_both_subprotocols(server, http, gql, services):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    # A count no JSON number carries exactly: its field fails with an internal error.
    async with services.databases.main_session() as session:
        await session.execute(
            text("INSERT INTO media_view_count (media_id, view_count) VALUES (:id, :views)"),
            {"id": decode_id(media["id"], "Media"), "views": 2**60},
        )
        await session.commit()
    legacy = await _legacy(ws_url(server))
    modern = await WebSocketClient.connect(ws_url(server))
    try:
        assert (await modern.receive())["type"] == "connection_ack"
        await legacy.start(COUNT_OVER, {"id": media["id"]})
        await modern.subscribe(COUNT_OVER, {"id": media["id"]})
        for payload in ((await legacy.receive())["payload"], (await modern.receive())["payload"]):
            assert payload["data"] == {"media": None}
            assert payload["errors"][0]["message"] == "Internal server error."
            assert payload["errors"][0]["extensions"] == {"code": "INTERNAL_SERVER_ERROR"}
    finally:
        await legacy.close()
        await modern.close()
