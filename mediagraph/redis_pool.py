"""Redis clients whose pool waits for a free connection instead of failing, and whose failures are counted.

redis-py's default pool raises `MaxConnectionsError` the moment a burst needs more
connections than its limit (100): under load some requests failed that a few
milliseconds of waiting would have served. A blocking pool queues them; a request
that still finds none within `POOL_WAIT_SECONDS` fails as Redis being unavailable.

A pooled connection may be dead (Redis restarted, a proxy dropped it): a command that
meets one is sent once more on a fresh connection. Only connection errors are retried,
never timeouts, which may mean the command ran. A second failure reaches the caller,
and clients see it as `SERVICE_UNAVAILABLE` (schema/extensions.py).

Commands and pipelines that cannot reach Redis (refused, reset, timed out, no pooled
connection in time) count into `mediagraph_redis_errors_total`; error replies
(NOSCRIPT, BUSYGROUP, …) are answers the callers handle, and are not counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import weakref
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, cast

import hiredis
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.asyncio.connection import AbstractConnection, Connection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.client import EMPTY_RESPONSE, NEVER_DECODE
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mediagraph.observability import metrics

POOL_WAIT_SECONDS = 5
SOCKET_TIMEOUT_SECONDS = 5
RETRIES_ON_DEAD_CONNECTION = 1

UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)


def _count(error: BaseException) -> None:
    timed_out = isinstance(error, RedisTimeoutError | TimeoutError)
    metrics.count_redis_error("timeout" if timed_out else "connection")


class CountingPipeline(Pipeline):
    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            return await super().execute(raise_on_error)
        except UNREACHABLE as error:
            _count(error)
            raise


class CountingRedis(Redis):
    async def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        except UNREACHABLE as error:
            _count(error)
            raise

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> CountingPipeline:
        return CountingPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)


class CountingRedisCluster(RedisCluster):
    """The cluster client, waiting for a connection like the blocking pool does.

    Each node's pool raises `MaxConnectionsError` when full. A command holds at most one
    connection per node (a pipeline one per node it touches), so letting at most
    `max_connections` commands and pipelines run at once keeps every node's pool within
    its limit: a burst waits for a permit, up to `POOL_WAIT_SECONDS`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.permits = asyncio.Semaphore(int(kwargs.get("max_connections", 100)))

    @contextlib.asynccontextmanager
    async def permit(self) -> AsyncIterator[None]:
        try:
            async with asyncio.timeout(POOL_WAIT_SECONDS):
                await self.permits.acquire()
        except TimeoutError:
            error = RedisConnectionError("no Redis connection free in time")
            _count(error)
            raise error from None
        try:
            yield
        finally:
            self.permits.release()

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        async with self.permit():
            try:
                return await super().execute_command(*args, **options)
            except UNREACHABLE as error:
                _count(error)
                raise

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> ClusterPipeline:
        if shard_hint:
            raise ValueError("a cluster pipeline takes no shard hint")
        return CountingClusterPipeline(self, transaction)  # type: ignore[abstract]


class CountingClusterPipeline(ClusterPipeline):
    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> list[Any]:
        client: CountingRedisCluster = self.cluster_client  # type: ignore[assignment]
        async with client.permit():
            try:
                return await super().execute(raise_on_error, allow_redirections)
            except UNREACHABLE as error:
                _count(error)
                raise


class HiredisPacking(AbstractConnection):
    """Commands packed into the Redis protocol by hiredis, in C, as redis-py's own synchronous
    client does when hiredis is installed. The asyncio client packs in Python, re-joining its
    buffer once per argument: a playback heartbeat (a script with 14 keys and 35 arguments)
    spent more time being packed than Redis spent running it."""

    def pack_command(self, *args: Any) -> list[bytes]:
        return [_packed(args)]

    def pack_commands(self, commands: Iterable[Iterable[Any]]) -> list[bytes]:
        return [b"".join(_packed(tuple(command)) for command in commands)]


def _packed(args: tuple[Any, ...]) -> bytes:
    # As redis-py's packers: a command name given with spaces ("CONFIG GET") is several words.
    name = args[0]
    if isinstance(name, str):
        args = (*name.encode().split(), *args[1:])
    elif b" " in name:
        args = (*name.split(), *args[1:])
    try:
        return cast(bytes, hiredis.pack_command(args))
    except TypeError:
        # hiredis takes str, bytes, int and float; redis-py also sends buffers.
        plain: tuple[Any, ...] = tuple(bytes(arg) if isinstance(arg, bytearray | memoryview) else arg for arg in args)
        try:
            return cast(bytes, hiredis.pack_command(plain))
        except TypeError as error:
            raise DataError(str(error)) from None


class PackedConnection(HiredisPacking, Connection):
    """TCP (`redis://`)."""


class PackedSSLConnection(HiredisPacking, SSLConnection):
    """TLS (`rediss://`)."""


class PackedUnixConnection(HiredisPacking, UnixDomainSocketConnection):
    """A Unix socket (`unix://`, the embedded Redis)."""


PACKED_CONNECTIONS: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: PackedConnection,
    SSLConnection: PackedSSLConnection,
    UnixDomainSocketConnection: PackedUnixConnection,
}


async def execute_batch(redis: Redis, pipe: Pipeline) -> list[Any]:
    """Run what is queued on `pipe` (not executed) in one round trip on one pooled connection,
    answering as `pipe.execute(raise_on_error=False)` does: a reply per command, through the
    client's response callbacks, with error replies in place. One Redis, not a cluster.

    A batch of heartbeats spent more in redis-py's pipeline than in packing and reading its
    replies: the write runs as a task of its own (`asyncio.wait_for`), and every reply is read
    under a timer of its own and through several calls. Here the batch is written and its
    replies read straight off the connection's parser, under one timeout for the round trip.
    The connection's parts used (`_writer`, `_parser`) are redis-py's own, pinned by the lock
    file; `tests/test_redis_batches.py` compares the replies with the pipeline's.

    Failures as `CountingPipeline`: a connection found dead is dropped and the batch sent once
    more on a fresh one (so its commands must bear running twice, as `run_batched` asks); a
    timeout is not retried (the commands may have run); what cannot reach Redis is counted."""
    commands = pipe.command_stack
    if not commands:
        return []
    packed = b"".join(_packed(tuple(args)) for args, _ in commands)
    pool = redis.connection_pool
    held = _held.get(redis)
    if held is None:
        held = _held[redis] = []
    if held:
        connection = held.pop()
    else:
        try:
            connection = await pool.get_connection()  # type: ignore[no-untyped-call]
        except UNREACHABLE as error:
            _count(error)
            raise
    answered = False
    try:
        for attempt in range(RETRIES_ON_DEAD_CONNECTION + 1):
            try:
                replies = await _round_trip(connection, packed, commands)
                answered = True
                break
            except RedisTimeoutError as error:
                _count(error)
                raise
            except (RedisConnectionError, OSError) as error:
                if attempt == RETRIES_ON_DEAD_CONNECTION:
                    _count(error)
                    raise
    finally:
        if answered and len(held) < BATCH_CONNECTIONS_HELD:
            held.append(connection)
        else:
            await pool.release(connection)
    callbacks = redis.response_callbacks
    answers: list[Any] = []
    for (args, options), reply in zip(commands, replies, strict=True):
        if isinstance(reply, ResponseError):
            answers.append(options.get(EMPTY_RESPONSE, reply))
            continue
        callback = callbacks.get(args[0])
        if callback is None:
            answers.append(reply)
            continue
        extra = {name: value for name, value in options.items() if name not in _NOT_FOR_CALLBACKS}
        answer = callback(reply, **extra)
        answers.append(await answer if inspect.isawaitable(answer) else answer)
    return answers


# Connections a client's batches keep between round trips, by client. Taking one from the
# pool and giving it back cost 12 us a batch (the pool's lock and wait, and its check that
# nothing is left to read, which a connection that read every reply of its batch passes
# anyway); a batch takes a held one instead. At most as many as batches go out at once
# (`lua.Lane`: one cheap and two heavy); the pool counts them in use.
BATCH_CONNECTIONS_HELD = 3
_held: weakref.WeakKeyDictionary[Redis, list[AbstractConnection]] = weakref.WeakKeyDictionary()

# What redis-py's pipeline takes out of a command's options before its response callback.
_NOT_FOR_CALLBACKS = frozenset({"keys", NEVER_DECODE, EMPTY_RESPONSE})


async def _round_trip(
    connection: AbstractConnection, packed: bytes, commands: Sequence[tuple[Any, Mapping[str, Any]]]
) -> list[Any]:
    """Write `packed` and read a reply per command (error replies as exceptions, in place); the
    connection is dropped on any failure, so no reply of this batch is left for its next user."""
    try:
        if not connection.is_connected:
            await connection.connect()  # type: ignore[no-untyped-call]
        async with asyncio.timeout(connection.socket_timeout):
            writer = connection._writer
            # Typed as the base parser, whose subclasses (hiredis's here) all read replies.
            parser: Any = connection._parser
            if writer is None:
                raise RedisConnectionError("the connection closed before the batch was sent")
            writer.write(packed)
            await writer.drain()
            replies = []
            for _, options in commands:
                reply = await parser.read_response(disable_decoding=NEVER_DECODE in options)
                if isinstance(reply, RedisConnectionError):
                    raise reply
                replies.append(reply)
            return replies
    except TimeoutError:
        await connection.disconnect(nowait=True)
        raise RedisTimeoutError("Redis did not answer a batch in time") from None
    except BaseException:
        await connection.disconnect(nowait=True)
        raise


def redis_client(url: str, *, max_connections: int, cluster: bool = False) -> Redis:
    """A client of the Redis at `url`; with `cluster`, of the Redis Cluster `url` is a node of.

    The cluster client learns the slot map from that node and sends each command to the
    primary owning its key's slot; a pipeline is split per node. Every caller keeps to
    what both clients offer (keys/ guarantees that a script, a transaction and a
    multi-key command stay in one slot), so it is handed out as a `Redis`.
    """
    if cluster:
        client = CountingRedisCluster.from_url(
            url,
            max_connections=max_connections,
            socket_timeout=SOCKET_TIMEOUT_SECONDS,
            socket_connect_timeout=SOCKET_TIMEOUT_SECONDS,
        )
        _pack_with_hiredis(client)
        return cast(Redis, client)
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=POOL_WAIT_SECONDS,
        socket_timeout=SOCKET_TIMEOUT_SECONDS,
        socket_connect_timeout=SOCKET_TIMEOUT_SECONDS,
        retry=Retry(NoBackoff(), RETRIES_ON_DEAD_CONNECTION),
        retry_on_error=[RedisConnectionError],
    )
    # The URL's scheme chose the connection class (TCP, TLS or a Unix socket).
    pool.connection_class = PACKED_CONNECTIONS.get(pool.connection_class, pool.connection_class)
    return CountingRedis(connection_pool=pool)


def _pack_with_hiredis(client: RedisCluster) -> None:
    """The cluster client takes no connection class: its nodes (the known ones, and the ones it
    learns of later from the shared keyword arguments) get the packing one here."""
    manager = client.nodes_manager
    chosen = manager.connection_kwargs.get("connection_class", Connection)
    packed = PACKED_CONNECTIONS.get(chosen, chosen)
    manager.connection_kwargs["connection_class"] = packed
    for node in manager.startup_nodes.values():
        node.connection_class = packed


def pool_usage(client: Redis) -> tuple[int, int]:
    """Connections (in use, idle) of a client's pool (of every node's, on a cluster)."""
    if isinstance(client, RedisCluster):
        nodes = client.get_nodes()
        return (
            sum(len(getattr(node, "_connections", ())) - len(getattr(node, "_free", ())) for node in nodes),
            sum(len(getattr(node, "_free", ())) for node in nodes),
        )
    pool = client.connection_pool
    in_use = getattr(pool, "_in_use_connections", ())
    idle = getattr(pool, "_available_connections", ())
    return len(in_use), len(idle)


async def durability_warnings(redis: Redis) -> list[str]:
    """What in Redis's configuration may lose data we keep there; empty when nothing does.

    Counted views not yet flushed, playback counters not yet rolled up and leaderboard
    scores live in Redis for a moment before PostgreSQL has them: a Redis without an
    append-only file loses them when it restarts, and one that evicts keys may drop them
    (or the dedupe keys that keep a view from counting twice) at any time.
    """
    try:
        configs = await _configs(redis)
    except ResponseError as error:
        return [f"cannot read Redis's configuration ({error}); make sure it persists and never evicts keys"]
    warnings: list[str] = []
    for config in configs:
        for warning in _config_warnings(config):
            if warning not in warnings:
                warnings.append(warning)
    return warnings


# One name per CONFIG GET: Redis before 7 takes a single pattern.
CONFIG_NAMES = ("appendonly", "save", "maxmemory", "maxmemory-policy")


async def _configs(redis: Redis) -> list[dict[str, str]]:
    """The durability settings of the Redis, or of each primary of a cluster."""
    if isinstance(redis, RedisCluster):
        configs = []
        for node in redis.get_primaries():
            config: dict[str, str] = {}
            for name in CONFIG_NAMES:
                config.update(await redis.config_get(name, target_nodes=node))
            configs.append(config)
        return configs
    async with redis.pipeline(transaction=False) as pipe:
        for name in CONFIG_NAMES:
            pipe.config_get(name)
        replies = await pipe.execute()
    return [{name: value for reply in replies for name, value in reply.items()}]


def _config_warnings(config: dict[str, str]) -> list[str]:
    warnings: list[str] = []
    if config.get("appendonly") != "yes":
        kept = "only periodic snapshots" if config.get("save") else "nothing"
        warnings.append(
            f"Redis keeps {kept} on disk (appendonly no): a restart loses recent writes such as counted views "
            "not yet in PostgreSQL; set `appendonly yes` (with `appendfsync everysec`)"
        )
    policy = config.get("maxmemory-policy", "noeviction")
    if int(config.get("maxmemory") or 0) > 0 and policy != "noeviction":
        warnings.append(
            f"Redis evicts keys when full (maxmemory-policy {policy}): it may drop pending counts or dedupe keys; "
            "set `maxmemory-policy noeviction`"
        )
    return warnings
