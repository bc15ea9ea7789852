"""Redis calls merged across requests (`lua.run_batched`): while the batches a lane allows out are
out, what is asked meanwhile waits for one to come back and goes together (in batches of the
lane's size), each batch on one connection, each caller answered with its own replies; a batch
that fails holds nothing after it. A batch's round trip
(`redis_pool.execute_batch`) answers exactly as redis-py's pipeline does."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mediagraph import lua
from mediagraph.lua import CHEAP, HEAVY, Lane, Lua, run_batched
from mediagraph.redis_pool import execute_batch
from mediagraph.settings import Settings

# Keeps Redis busy for ARGV[2] ms (by its own clock), then answers ARGV[1]. No keys: it runs
# on whichever node the URL names, a cluster's included.
SLOW_ECHO = Lua(
    """
local started = redis.call('TIME')
local until_us = started[1] * 1000000 + started[2] + tonumber(ARGV[2]) * 1000
while true do
  local now = redis.call('TIME')
  if now[1] * 1000000 + now[2] >= until_us then break end
end
return ARGV[1]
"""
)


@pytest.fixture
async def named_client(settings: Settings) -> AsyncIterator[tuple[Redis, str]]:
    name = f"batches-{uuid.uuid4().hex[:10]}"
    pool = BlockingConnectionPool.from_url(settings.redis_url, client_name=name, max_connections=20)
    client = Redis(connection_pool=pool)
    try:
        yield client, name
    finally:
        await client.aclose()


async def _echo(client: Redis, value: str, busy_ms: int = 0, *, lane: Lane = CHEAP) -> str:
    [reply] = await run_batched(
        client, [SLOW_ECHO], lambda pipe: SLOW_ECHO.queue(pipe, [], [value, busy_ms]), lane=lane
    )
    return reply.decode()  # type: ignore[no-any-return]


async def _connections_named(client: Redis, name: str) -> int:
    """The client's connections to Redis, not counting the one asking (CLIENT LIST itself)."""
    return sum(
        1
        for entry in await client.client_list(_type="normal")
        if entry.get("name") == name and not str(entry.get("cmd", "")).startswith("client")
    )


async def test_asks_made_while_a_batch_is_out_go_together_when_it_returns(
    named_client: tuple[Redis, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, name = named_client
    sizes = _batch_sizes(monkeypatch)
    assert CHEAP.max_in_flight == 1
    assert CHEAP.max_asks is None
    first = asyncio.create_task(_echo(client, "first", busy_ms=300))
    # Let the first batch leave, then ask in later turns while Redis is still busy with it.
    await asyncio.sleep(0.05)
    later = []
    values = [str(n) for n in range(20)]
    for value in values:
        later.append(asyncio.create_task(_echo(client, value)))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    answers = await asyncio.wait_for(asyncio.gather(first, *later), 10)
    assert answers == ["first", *values]
    assert sizes == [1, len(values)]
    # One batch out at a time: the later asks went on the connection the first one freed.
    # (Sent as they came, each would have taken a connection of its own while Redis was busy.)
    assert await _connections_named(client, name) == 1


async def test_a_heavy_lane_keeps_two_bounded_batches_out(
    named_client: tuple[Redis, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, name = named_client
    sizes = _batch_sizes(monkeypatch)
    assert HEAVY.max_asks is not None
    # As many batches out as the lane allows, each one slow ask that left on its own.
    out = []
    for n in range(HEAVY.max_in_flight):
        out.append(asyncio.create_task(_echo(client, f"slow {n}", busy_ms=300, lane=HEAVY)))
        await asyncio.sleep(0.05)
    # Then asks in later turns while Redis is still busy with those.
    later = []
    values = [str(n) for n in range(HEAVY.max_asks + 3)]
    for value in values:
        later.append(asyncio.create_task(_echo(client, value, lane=HEAVY)))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    answers = await asyncio.wait_for(asyncio.gather(*out, *later), 10)
    assert answers == [f"slow {n}" for n in range(HEAVY.max_in_flight)] + values
    # The asks waited for a batch to come back and left together, at most a batch's worth at a
    # time; the rest waited for the next return.
    assert sizes == [1] * HEAVY.max_in_flight + [HEAVY.max_asks, 3]
    # Never more batches out than the lane allows: the later asks went on the connections freed.
    assert await _connections_named(client, name) == HEAVY.max_in_flight


def _batch_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of commands of each batch sent from now on, in order."""
    sizes: list[int] = []

    async def counted(redis: Redis, pipe: Pipeline) -> list[object]:
        sizes.append(len(pipe.command_stack))
        return await execute_batch(redis, pipe)

    monkeypatch.setattr(lua, "execute_batch", counted)
    return sizes


async def test_a_lone_ask_is_answered_at_once(named_client: tuple[Redis, str]) -> None:
    client, _ = named_client
    assert await asyncio.wait_for(_echo(client, "alone"), 5) == "alone"
    # And again once the loop is idle: nothing is left waiting for a batch that never comes.
    await asyncio.sleep(0.01)
    assert await asyncio.wait_for(_echo(client, "again"), 5) == "again"


async def test_a_failed_batch_holds_nothing_after_it() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on that port: every batch fails to connect.
    client = Redis.from_url(f"redis://127.0.0.1:{port}/0", socket_connect_timeout=1)
    try:
        for _ in range(3):
            with pytest.raises(RedisConnectionError):
                await asyncio.wait_for(_echo(client, "lost"), 5)
        results = await asyncio.wait_for(
            asyncio.gather(*(_echo(client, str(n)) for n in range(5)), return_exceptions=True), 5
        )
        assert all(isinstance(result, RedisConnectionError) for result in results), results
    finally:
        await client.aclose()


async def test_callers_of_one_batch_each_get_their_own_replies_or_error(named_client: tuple[Redis, str]) -> None:
    client, _ = named_client
    failing = Lua("return redis.error_reply('ERR refused on purpose')")

    async def refused() -> object:
        return await failing.run_batched(client, [], [])

    values = [str(n) for n in range(20)]
    results = await asyncio.wait_for(
        asyncio.gather(refused(), *(_echo(client, value) for value in values), refused(), return_exceptions=True), 10
    )
    assert results[1:-1] == values
    for result in (results[0], results[-1]):
        assert isinstance(result, Exception)
        assert "refused on purpose" in str(result)
    assert await asyncio.wait_for(run_batched(client, [], lambda pipe: pipe.ping()), 5) == [True]


def _queue_mixed(pipe: Pipeline, prefix: str) -> None:
    """Commands whose replies redis-py shapes in every way a caller may meet: plain, through a
    response callback (with the command's options), error replies, and a script Redis lacks."""
    pipe.set(f"{prefix}string", "value", ex=60)
    pipe.get(f"{prefix}string")
    pipe.zadd(f"{prefix}zset", {"a": 1, "b": 2.5})
    pipe.zadd(f"{prefix}zset", {"a": 0.5}, gt=True)
    pipe.zadd(f"{prefix}zset", {"c": 4}, incr=True)
    pipe.zrange(f"{prefix}zset", 0, -1, withscores=True)
    pipe.zscore(f"{prefix}zset", "b")
    pipe.hset(f"{prefix}hash", mapping={"f": "1", "g": "2"})
    pipe.hgetall(f"{prefix}hash")
    pipe.hincrbyfloat(f"{prefix}hash", "f", 0.5)
    pipe.sadd(f"{prefix}set", "x", "y")
    pipe.smembers(f"{prefix}set")
    pipe.expire(f"{prefix}set", 60)
    pipe.exists(f"{prefix}string", f"{prefix}missing")
    pipe.hget(f"{prefix}zset", "a")  # WRONGTYPE
    pipe.execute_command("EVALSHA", "0" * 40, 0)  # NOSCRIPT
    pipe.eval("return {1, 'two', redis.error_reply('ERR inside')}", 0)
    pipe.ping()


def _comparable(reply: object) -> object:
    # Errors compare by kind and by Redis's message (the pipeline prefixes its command's position).
    if isinstance(reply, Exception):
        return (type(reply), str(reply).rsplit(" caused error: ", 1)[-1])
    if isinstance(reply, list):
        return [_comparable(item) for item in reply]
    return reply


async def test_a_batch_answers_as_redis_pys_pipeline_does(named_client: tuple[Redis, str], settings: Settings) -> None:
    client, _ = named_client
    by_pipeline = f"{settings.redis_prefix}batch-compare:{uuid.uuid4().hex[:8]}:"
    by_batch = f"{settings.redis_prefix}batch-compare:{uuid.uuid4().hex[:8]}:"
    try:
        async with client.pipeline(transaction=False) as pipe:
            _queue_mixed(pipe, by_pipeline)
            expected = await pipe.execute(raise_on_error=False)
        async with client.pipeline(transaction=False) as pipe:
            _queue_mixed(pipe, by_batch)
            answered = await execute_batch(client, pipe)
        assert len(answered) == len(expected) == 18
        assert _comparable(answered) == _comparable(expected)
        # Not trivially equal: callbacks shaped them, and errors stand in place.
        assert answered[5] == [(b"a", 1.0), (b"b", 2.5), (b"c", 4.0)]
        assert answered[8] == {b"f": b"1", b"g": b"2"}
        assert isinstance(answered[14], Exception)
        assert "WRONGTYPE" in str(answered[14])
        assert type(answered[15]).__name__ == "NoScriptError"
        # And the connection is back in the pool, clean: the next batch reads its own replies.
        async with client.pipeline(transaction=False) as pipe:
            pipe.get(f"{by_batch}string")
            assert await execute_batch(client, pipe) == [b"value"]
    finally:
        for prefix in (by_pipeline, by_batch):
            await client.delete(*(prefix + name for name in ("string", "zset", "hash", "set")))


async def test_a_batch_meeting_a_dead_connection_goes_again_on_a_fresh_one(
    named_client: tuple[Redis, str], settings: Settings
) -> None:
    client, name = named_client
    assert await client.ping()
    # The pooled connection dies (Redis restarted, a proxy dropped it) while idle.
    killer = Redis.from_url(settings.redis_url)
    try:
        ids = [entry["id"] for entry in await killer.client_list(_type="normal") if entry.get("name") == name]
        assert len(ids) == 1
        assert await killer.client_kill_filter(_id=ids[0]) == 1
    finally:
        await killer.aclose()
    async with client.pipeline(transaction=False) as pipe:
        pipe.echo("after")
        pipe.ping()
        assert await asyncio.wait_for(execute_batch(client, pipe), 5) == [b"after", True]
    assert await _connections_named(client, name) == 1


async def test_a_batch_that_times_out_leaves_no_late_reply_behind(settings: Settings) -> None:
    client = Redis(connection_pool=BlockingConnectionPool.from_url(settings.redis_url, socket_timeout=0.2))
    try:
        assert await SLOW_ECHO.run(client, [], ["loaded", 0]) == b"loaded"  # Redis knows the script
        async with client.pipeline(transaction=False) as pipe:
            SLOW_ECHO.queue(pipe, [], ["late", 600])
            with pytest.raises(RedisTimeoutError):
                await execute_batch(client, pipe)
        # The connection that waited was dropped: the late "late" reaches no one.
        await asyncio.sleep(0.6)
        async with client.pipeline(transaction=False) as pipe:
            pipe.echo("mine")
            assert await execute_batch(client, pipe) == [b"mine"]
    finally:
        await client.aclose()


async def test_batches_one_after_another_go_on_the_connection_the_first_one_kept(
    named_client: tuple[Redis, str],
) -> None:
    client, _ = named_client
    ids = []
    for _ in range(3):
        async with client.pipeline(transaction=False) as pipe:
            pipe.client_id()
            [found] = await execute_batch(client, pipe)
        ids.append(found)
    assert len(set(ids)) == 1
    # The kept connection is the batches' own: the client's other commands use the pool's others.
    assert await client.client_id() != ids[0]
