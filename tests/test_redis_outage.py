"""Redis restarting or gone: one retry on a dead pooled connection, then SERVICE_UNAVAILABLE."""

from __future__ import annotations

import asyncio
import logging

import pytest

from mediagraph.redis_pool import durability_warnings
from tests.support.apps import app_with, private_prefix
from tests.support.factories import RECORD_VIEW, create_media, create_user
from tests.support.graphql import error_extensions
from tests.support.servers import PrivateRedis

HOT = "{ hotMedia { entries { rank } } }"


@pytest.fixture
async def private(settings, tmp_path):
    redis = PrivateRedis(tmp_path / "redis")
    redis.start()
    try:
        async with app_with(settings, redis_url=redis.url, redis_prefix=private_prefix(settings, "outage")) as app:
            yield redis, app
    finally:
        redis.stop()


async def _views(gql, media_id: str, count: int) -> list[dict]:
    return await asyncio.gather(
        *(
            gql.http.post(
                "/graphql",
                json={"query": RECORD_VIEW, "variables": {"id": media_id}},
                headers={"user-agent": f"browser-{n}"},
            )
            for n in range(count)
        )
    )


async def test_no_request_fails_right_after_redis_restarts(private):
    redis, (_, gql) = private
    token, _ = await create_user(gql)
    media = await create_media(gql.http, token=token)
    # A burst opens several pooled connections; the restart kills every one of them.
    assert all(response.json()["data"]["recordView"]["counted"] for response in await _views(gql, media["id"], 12))
    redis.stop()
    redis.start()
    responses = await _views(gql, media["id"], 12)
    assert [response.json().get("errors") for response in responses] == [None] * 12
    await gql.ok(HOT)  # answers (its entries depend on what other tests engaged with today)


async def test_redis_down_is_service_unavailable_not_an_internal_error(private):
    redis, (_, gql) = private
    await gql.ok(HOT)  # answers (its entries depend on what other tests engaged with today)
    redis.stop()
    result = await gql(HOT)
    assert error_extensions(result) == {"code": "SERVICE_UNAVAILABLE"}
    assert "unavailable" in result["errors"][0]["message"]
    redis.start()
    await gql.ok(HOT)  # answers (its entries depend on what other tests engaged with today)


async def test_redis_that_keeps_nothing_or_evicts_is_warned_about_at_startup(settings, tmp_path, caplog):
    redis = PrivateRedis(tmp_path / "redis")  # started with no snapshots and no append-only file
    redis.start()
    try:
        with caplog.at_level(logging.WARNING, logger="mediagraph.app"):
            async with app_with(settings, redis_url=redis.url, redis_prefix=private_prefix(settings, "d")) as app:
                services, _ = app
                assert "Redis keeps nothing on disk (appendonly no)" in caplog.text
                await services.redis.config_set("maxmemory", "100mb")
                await services.redis.config_set("maxmemory-policy", "allkeys-lru")
                warnings = await durability_warnings(services.redis)
                assert len(warnings) == 2
                assert "maxmemory-policy allkeys-lru" in warnings[1]
                await services.redis.config_set("appendonly", "yes")
                await services.redis.config_set("maxmemory-policy", "noeviction")
                assert await durability_warnings(services.redis) == []
                await services.redis.config_set("appendonly", "no")  # so that SIGTERM stops it at once
    finally:
        redis.stop()
