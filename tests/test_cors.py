"""Browser pages on other origins: CORS on HTTP and the Origin check on websockets, on real servers."""

from __future__ import annotations

import httpx
import pytest
import websockets

from tests.support.graphql import WebSocketClient

APP = "https://app.example.com"
EVIL = "https://evil.example"
DEV_PAGE = "http://localhost:5173"
QUERY = {"query": "{ me { username } }"}


@pytest.fixture(scope="module")
def configured(live_servers) -> str:
    return live_servers.start("--no-workers", MEDIAGRAPH_CORS_ORIGINS=APP)


@pytest.fixture(scope="module")
def development(live_servers) -> str:
    return live_servers.start("--no-workers", MEDIAGRAPH_ENVIRONMENT="development")


@pytest.fixture(scope="module")
def production(live_servers) -> str:
    return live_servers.start("--no-workers", MEDIAGRAPH_ENVIRONMENT="production")


def _preflight(base: str, origin: str) -> httpx.Response:
    return httpx.options(
        f"{base}/graphql",
        headers={
            "origin": origin,
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization, content-type",
        },
    )


def _post(base: str, origin: str) -> httpx.Response:
    return httpx.post(f"{base}/graphql", json=QUERY, headers={"origin": origin})


async def _handshake(base: str, origin: str | None) -> int:
    """101 when the websocket opens (and acknowledges), else the handshake's HTTP status."""
    headers = {"origin": origin} if origin else {}
    url = base.replace("http://", "ws://") + "/graphql"
    try:
        connection = await websockets.connect(url, subprotocols=["graphql-transport-ws"], additional_headers=headers)  # type: ignore[list-item]
    except websockets.InvalidStatus as refused:
        return refused.response.status_code
    client = WebSocketClient(connection)
    try:
        await client.send({"type": "connection_init", "payload": {}})
        assert (await client.receive())["type"] == "connection_ack"
        return 101
    finally:
        await client.close()


def test_a_configured_origin_gets_a_cached_credentialed_preflight_and_answers(configured):
    preflight = _preflight(configured, APP)
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == APP
    assert preflight.headers["access-control-allow-credentials"] == "true"
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert preflight.headers["access-control-allow-headers"].lower() == "authorization, content-type"
    assert int(preflight.headers["access-control-max-age"]) >= 600
    assert "origin" in preflight.headers["vary"].lower()

    response = _post(configured, APP)
    assert response.status_code == 200
    assert response.json() == {"data": {"me": None}}
    assert response.headers["access-control-allow-origin"] == APP
    assert response.headers["access-control-allow-credentials"] == "true"
    assert "x-request-id" in response.headers["access-control-expose-headers"].lower()


def test_another_origin_gets_no_cors_headers(configured):
    assert _preflight(configured, EVIL).status_code == 400
    response = _post(configured, EVIL)
    assert "access-control-allow-origin" not in response.headers
    # Loopback pages are only the development default: a configured list replaces it.
    assert "access-control-allow-origin" not in _post(configured, DEV_PAGE).headers


async def test_websockets_open_from_allowed_origins_and_from_clients_that_send_none(configured):
    assert await _handshake(configured, APP) == 101
    assert await _handshake(configured, None) == 101
    assert await _handshake(configured, EVIL) == 403


async def test_development_allows_loopback_pages_on_any_port(development):
    assert _preflight(development, DEV_PAGE).headers["access-control-allow-origin"] == DEV_PAGE
    assert _post(development, "http://127.0.0.1:8080").headers["access-control-allow-origin"] == "http://127.0.0.1:8080"
    assert _preflight(development, APP).status_code == 400
    assert await _handshake(development, DEV_PAGE) == 101
    assert await _handshake(development, APP) == 403


async def test_production_allows_no_other_origin_by_default(production):
    assert _preflight(production, DEV_PAGE).status_code == 400
    assert "access-control-allow-origin" not in _post(production, DEV_PAGE).headers
    assert await _handshake(production, DEV_PAGE) == 403
    assert await _handshake(production, None) == 101
