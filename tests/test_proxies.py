"""Whose X-Forwarded-For names the client: MEDIAGRAPH_FORWARDED_ALLOW_IPS, never uvicorn's own variable."""

from __future__ import annotations

import httpx
import pytest
from pydantic import ValidationError

from mediagraph.settings import Settings
from tests.support.factories import RECORD_VIEW, create_media, create_user

AGENT = {"user-agent": "one-browser/1.0"}


def _view(base: str, media_id: str, forwarded_for: str | None) -> int:
    headers = {**AGENT, **({"x-forwarded-for": forwarded_for} if forwarded_for else {})}
    body = httpx.post(f"{base}/graphql", json={"query": RECORD_VIEW, "variables": {"id": media_id}}, headers=headers)
    assert not body.json().get("errors"), body.text
    return body.json()["data"]["recordView"]["counted"]  # type: ignore[no-any-return]


@pytest.fixture
async def media_id(gql, http) -> str:
    token, _ = await create_user(gql)
    return (await create_media(http, token=token))["id"]


def test_loopback_proxies_are_trusted_by_default(media_id, live_servers):
    base = live_servers.start()
    # Two people behind a proxy on this machine are two viewers, each counted once.
    assert _view(base, media_id, "198.51.100.1") == 1
    assert _view(base, media_id, "198.51.100.2") == 1
    assert _view(base, media_id, "198.51.100.1") == 0
    assert _view(base, media_id, None) == 1


def test_uvicorns_own_variable_does_not_widen_whom_we_trust(media_id, live_servers):
    base = live_servers.start(MEDIAGRAPH_FORWARDED_ALLOW_IPS="192.0.2.10", FORWARDED_ALLOW_IPS="*")
    # Loopback is no proxy here: the header is the client's say-so, and the socket address counts.
    assert _view(base, media_id, "198.51.100.1") == 1
    assert _view(base, media_id, "198.51.100.2") == 0
    assert _view(base, media_id, None) == 0


def test_the_setting_takes_addresses_networks_or_a_star():
    assert Settings(forwarded_allow_ips="10.0.0.1, 10.1.0.0/16,::1").forwarded_allow_ips == [
        "10.0.0.1",
        "10.1.0.0/16",
        "::1",
    ]
    assert Settings(forwarded_allow_ips="*").forwarded_allow_ips == ["*"]
    assert Settings(forwarded_allow_ips="").forwarded_allow_ips == []
    assert Settings().forwarded_allow_ips == ["127.0.0.1", "::1"]
    with pytest.raises(ValidationError, match="neither an IP address"):
        Settings(forwarded_allow_ips="proxy.internal")
