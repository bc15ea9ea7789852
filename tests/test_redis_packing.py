"""Commands packed by hiredis are byte for byte what redis-py's own packer sends, and reach Redis intact."""

from __future__ import annotations

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection
from redis.exceptions import DataError

from mediagraph.redis_pool import PackedConnection
from mediagraph.services import Services

COMMANDS: list[tuple[object, ...]] = [
    ("PING",),
    ("SET", "key", "value", "EX", 60),
    ("CONFIG GET", "maxmemory"),
    (b"CONFIG GET", b"save"),
    ("EVALSHA", "0" * 40, 2, "a:{1}:x", "a:{1}:y", -3, 0, 10**20, 1.5, 0.1, 1e-07, float("inf")),
    ("HSET", "naïve:{é}", "field", "값", b"\x00\xff", bytearray(b"ba"), memoryview(b"mv")),
    ("SET", "big", "x" * 100_000),
]


def _sent(connection: Connection, *args: object) -> bytes:
    return b"".join(connection.pack_command(*args))


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: str(command[0]))
def test_a_command_is_packed_as_redis_py_packs_it(command: tuple[object, ...]) -> None:
    assert _sent(PackedConnection(), *command) == _sent(Connection(), *command)


def test_a_pipeline_is_packed_as_redis_py_packs_it() -> None:
    assert b"".join(PackedConnection().pack_commands(COMMANDS)) == b"".join(Connection().pack_commands(COMMANDS))


@pytest.mark.parametrize("bad", [None, True, object()])
def test_what_redis_py_refuses_to_send_is_refused_alike(bad: object) -> None:
    with pytest.raises(DataError):
        Connection().pack_command("SET", "key", bad)
    with pytest.raises(DataError):
        PackedConnection().pack_command("SET", "key", bad)


async def test_the_client_sends_arguments_to_redis_intact(services: Services) -> None:
    client = services.redis
    key = services.keys.key("packing", "{é}")
    values = ["값", b"\x00\xff", 10**20, 1.5, "x" * 100_000]
    try:
        echoed = await client.eval("return ARGV", 1, key, *values)
        assert echoed == [b"\xea\xb0\x92", b"\x00\xff", b"100000000000000000000", b"1.5", b"x" * 100_000]
        async with client.pipeline(transaction=False) as pipe:
            pipe.hset(key, mapping={"a": "값", "b": 7})
            pipe.hgetall(key)
            replies = await pipe.execute()
        assert replies[1] == {b"a": "값".encode(), b"b": b"7"}
        if isinstance(client, RedisCluster):
            # Known once the client has learnt the slot map (by now, it has).
            connection_classes = {node.connection_class for node in client.get_nodes()}
        else:
            connection_classes = {client.connection_pool.connection_class}
        assert connection_classes == {PackedConnection}
    finally:
        await client.delete(key)
