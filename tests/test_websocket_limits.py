"""Websocket limits on a real server: operations per socket, open sockets per client address,
and an `extensions.code` on every error either subprotocol sends."""

from __future__ import annotations

import pytest
import websockets

from tests.support.graphql import LegacyWebSocketClient, WebSocketClient
from tests.support.metrics import wait_for_sample

LIVE = 'subscription { mediaUploaded(tags: ["limits"]) { title } }'
ME = "query { me { username } }"
PER_SOCKET = 2
PER_ADDRESS = 3


@pytest.fixture(scope="module")
def base(live_servers) -> str:
    return live_servers.start(
        "--no-workers",
        MEDIAGRAPH_MAX_SUBSCRIPTIONS_PER_CONNECTION=str(PER_SOCKET),
        MEDIAGRAPH_MAX_CONNECTIONS_PER_ADDRESS=str(PER_ADDRESS),
    )


@pytest.fixture(scope="module")
def url(base) -> str:
    return base.replace("http://", "ws://") + "/graphql"


async def _modern(url: str) -> WebSocketClient:
    client = await WebSocketClient.connect(url)
    assert (await client.receive())["type"] == "connection_ack"
    return client


async def _legacy(url: str) -> LegacyWebSocketClient:
    client = await LegacyWebSocketClient.connect(url)
    assert (await client.receive())["type"] == "connection_ack"
    return client


async def test_a_subscribe_past_the_limit_gets_a_coded_error_and_the_socket_stays(url):
    client = await _modern(url)
    try:
        running = [await client.subscribe(LIVE) for _ in range(PER_SOCKET)]
        refused = await client.subscribe(LIVE)
        message = await client.receive()
        assert message["type"] == "error"
        assert message["id"] == refused
        assert message["payload"][0]["extensions"] == {"code": "TOO_MANY_SUBSCRIPTIONS", "limit": PER_SOCKET}
        # Completing one makes room on the same socket.
        await client.send({"id": running[0], "type": "complete"})
        operation = await client.subscribe(ME)
        assert await client.receive() == {"id": operation, "type": "next", "payload": {"data": {"me": None}}}
    finally:
        await client.close()


async def test_legacy_graphql_ws_has_the_same_limit_with_the_same_code(url):
    client = await _legacy(url)
    try:
        running = [await client.start(LIVE) for _ in range(PER_SOCKET)]
        refused = await client.start(LIVE)
        message = await client.receive()
        assert message["type"] == "error"
        assert message["id"] == refused
        assert message["payload"]["extensions"]["code"] == "TOO_MANY_SUBSCRIPTIONS"
        await client.stop(running[0])
        assert await client.receive() == {"type": "complete", "id": running[0]}
        operation = await client.start(ME)
        assert await client.receive() == {"type": "data", "id": operation, "payload": {"data": {"me": None}}}
    finally:
        await client.close()


async def _refused(url: str) -> None:
    # The server may close before connection_init is even sent: either step sees the close.
    extra = await WebSocketClient.connect(url)
    await extra.receive()


async def test_sockets_past_the_limit_per_address_are_closed_with_4429(base, url):
    # The server lets go of a socket just after the client sees it closed: start from none open.
    wait_for_sample(base, "mediagraph_websockets_open", lambda open_: open_ == 0)
    open_ = [await _modern(url) for _ in range(PER_ADDRESS)]
    try:
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await _refused(url)
        assert closed.value.rcvd is not None
        assert closed.value.rcvd.code == 4429
        # Behind a trusted proxy (loopback is one by default) the forwarded address counts.
        forwarded = await websockets.connect(
            url, subprotocols=["graphql-transport-ws"], additional_headers={"x-forwarded-for": "198.51.100.9"}
        )
        other = WebSocketClient(forwarded)
        await other.send({"type": "connection_init", "payload": {}})
        assert (await other.receive())["type"] == "connection_ack"
        await other.close()
        # A socket closed gives its place back.
        await open_.pop().close()
        wait_for_sample(base, "mediagraph_websockets_open", lambda open_: open_ < PER_ADDRESS)
        again = await _modern(url)
        open_.append(again)
    finally:
        for client in open_:
            await client.close()


async def test_validation_and_limit_errors_carry_a_code_on_both_subprotocols(url):
    modern = await _modern(url)
    legacy = await _legacy(url)
    try:
        operation = await modern.subscribe("subscription { noSuchField }")
        message = await modern.receive()
        assert (message["type"], message["id"]) == ("error", operation)
        assert [error["extensions"]["code"] for error in message["payload"]] == ["GRAPHQL_VALIDATION_FAILED"]
        operation = await modern.subscribe("query($n: Int!) { me { username } }", {"n": "seven"})
        message = await modern.receive()
        assert message["payload"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
        operation = await legacy.start("query($n: Int!) { me { username } }", {"n": "seven"})
        message = await legacy.receive()
        assert message["type"] == "error"
        assert message["payload"]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    finally:
        await modern.close()
        await legacy.close()


async def test_a_refused_token_carries_its_code_in_extensions_too(url):
    client = await LegacyWebSocketClient.connect(url, payload={"authorization": "Bearer forged"})
    try:
        message = await client.receive()
        assert message["type"] == "connection_error"
        assert message["payload"]["extensions"] == {"code": "UNAUTHENTICATED"}
    finally:
        await client.close()


async def test_a_legacy_connection_init_with_a_malformed_payload_gets_a_coded_error(url):
    connection = await websockets.connect(url, subprotocols=["graphql-ws"])  # type: ignore[list-item]
    client = LegacyWebSocketClient(connection)
    try:
        await client.send({"type": "connection_init", "payload": "not an object"})
        message = await client.receive()
        assert message["type"] == "connection_error"
        assert message["payload"]["extensions"] == {"code": "BAD_USER_INPUT"}
    finally:
        await client.close()
