"""The Redis Cluster fixture, the cluster client and sharded pub/sub, on a real 3-master cluster.

The feature tests run on the cluster too: `pytest --redis-cluster` (or
MEDIAGRAPH_TEST_REDIS_CLUSTER=true) makes every test's Redis this cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError

from mediagraph.keys import KeySpace
from mediagraph.keys.media import media_counts_channel, media_uploaded_channel
from mediagraph.keys.views import ViewBuffer, view_count_channel
from mediagraph.pubsub.bus import EventBus
from mediagraph.pubsub.subscribers import subscriber_counts
from mediagraph.redis_pool import durability_warnings, redis_client
from tests.support.redis_cluster import MIN_VERSION, RedisClusterServers, server_version


async def _subscribed_on_the_cluster(bus: EventBus, channels: list[str]) -> None:
    """Waits until the node owning each channel counts one subscriber on it."""
    client: RedisCluster = bus.backend._publisher  # type: ignore[assignment]
    for channel in channels:
        for _ in range(300):
            try:
                [count] = await subscriber_counts(client, bus.keys, [channel])  # type: ignore[arg-type]
            except (RedisConnectionError, OSError):
                count = 0  # the node is still coming back
            if count == 1:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"{channel} was never subscribed on its node")


async def _published_until_heard(bus: EventBus, channel: str, events: AsyncIterator[object]) -> object:
    """Publishes on `channel` until a message arrives (the listener may still be reconnecting)."""
    for _ in range(100):
        with contextlib.suppress(RedisConnectionError, OSError):
            await bus.publish(channel, {"id": 7})
        try:
            async with asyncio.timeout(0.2):
                return await anext(events)
        except TimeoutError:
            continue
    raise AssertionError(f"nothing arrived on {channel}")


@pytest.fixture
async def cluster_client(redis_cluster: RedisClusterServers) -> AsyncIterator[RedisCluster]:
    client = redis_client(redis_cluster.url, max_connections=20, cluster=True)
    assert isinstance(client, RedisCluster)
    await client.initialize()
    yield client
    await client.aclose()


def _keys() -> KeySpace:
    return KeySpace(f"mgtest:cluster:{uuid.uuid4().hex[:8]}:", sharded_pubsub=True)


def test_the_fixture_runs_redis_7_with_three_masters_sharing_every_slot(redis_cluster: RedisClusterServers) -> None:
    assert server_version() >= MIN_VERSION
    owned = 0
    for port in redis_cluster.ports:
        lines = redis_cluster._cli("cluster", "nodes", port=port).splitlines()
        myself = next(line for line in lines if "myself" in line)
        assert "master" in myself
        for part in myself.split()[8:]:
            low, _, high = part.partition("-")
            owned += int(high or low) - int(low) + 1
    assert owned == 16384
    assert len(redis_cluster.ports) == 3


async def test_entities_spread_over_nodes_and_each_script_stays_in_its_slot(cluster_client: RedisCluster) -> None:
    keys = _keys()
    buffer = ViewBuffer(cluster_client, keys, buckets=16)  # type: ignore[arg-type]
    for media_id in range(16):
        await buffer.count_view(media_id, "viewer", dedupe_seconds=60, push_hold_ms=100)
    nodes = {cluster_client.get_node_from_key(buffer.pending_key(bucket)).name for bucket in range(16)}  # type: ignore[union-attr]
    assert len(nodes) > 1
    unflushed = await buffer.read_unflushed(list(range(16)))
    assert unflushed.pending == dict.fromkeys(range(16), 1)
    assert await buffer.backlog() == 16
    batch = await buffer.take(3, lease_ms=10_000)
    assert batch is not None
    assert batch.deltas == {3: 1}
    await buffer.drop(batch)  # a transaction, in the bucket's slot
    assert await buffer.in_flight(3) == []
    found = [key async for key in cluster_client.scan_iter(match=f"{keys.prefix}*pending", count=100)]
    assert len(found) == 15  # SCAN visits every primary


async def test_durability_warnings_read_every_primary(cluster_client: RedisCluster) -> None:
    warnings = await durability_warnings(cluster_client)  # type: ignore[arg-type]
    assert any("appendonly no" in warning for warning in warnings)


async def test_entity_channels_are_sharded_and_read_once_per_node(redis_cluster: RedisClusterServers) -> None:
    keys = _keys()
    bus = EventBus(redis_cluster.url, keys, cluster=True)
    await bus.connect()
    try:
        channels = [view_count_channel(keys, media_id, 16) for media_id in range(12)]
        channels.append(media_counts_channel(keys, 7))
        assert all(keys.is_sharded(channel) for channel in channels)
        assert not keys.is_sharded(media_uploaded_channel(keys))
        received: list[tuple[str, object]] = []
        async with (
            bus.subscribe(channels[0]) as first,
            bus.subscribe(channels[0]) as first_again,
            bus.subscribe(media_uploaded_channel(keys)) as uploads,
            bus.notices(channels, min_interval=0) as notices,
        ):
            assert await anext(notices) == set(channels)
            routes = bus.backend._routes
            sharded = {name for name, route in routes.items() if route.sharded and route.channels}
            assert len(sharded) > 1  # the channels' slots live on several nodes
            # One reader per channel: two local subscribers share one SSUBSCRIBE.
            assert sum(channels[0] in route.channels for route in routes.values()) == 1
            await _subscribed_on_the_cluster(bus, channels)
            for channel in channels:
                await bus.publish(channel, {"on": channel})
            await bus.publish(media_uploaded_channel(keys), {"id": 1})
            async with asyncio.timeout(10):
                received.append((channels[0], await anext(first)))
                received.append((channels[0], await anext(first_again)))
                received.append(("uploads", await anext(uploads)))
                fired: set[str] = set()
                while fired != set(channels):
                    fired |= await anext(notices)
        assert received == [
            (channels[0], {"on": channels[0]}),
            (channels[0], {"on": channels[0]}),
            ("uploads", {"id": 1}),
        ]
        assert not any(route.channels for route in bus.backend._routes.values())
    finally:
        await bus.disconnect()


async def test_a_sharded_subscription_comes_back_after_its_node_restarts(tmp_path) -> None:
    # A cluster of its own: a restarted master comes back empty, which the run's cluster must not.
    servers = await asyncio.to_thread(RedisClusterServers(tmp_path / "cluster").start)
    keys = _keys()
    bus = EventBus(servers.url, keys, cluster=True)
    try:
        await bus.connect()
        client: RedisCluster = bus.backend._publisher  # type: ignore[assignment]
        # A channel away from the node the URL names, which the client starts from.
        channel = next(
            view_count_channel(keys, media_id, 16)
            for media_id in range(16)
            if client.get_node_from_key(view_count_channel(keys, media_id, 16)).port != servers.ports[0]  # type: ignore[union-attr]
        )
        port = int(client.get_node_from_key(channel).port)  # type: ignore[union-attr]
        async with bus.subscribe(channel) as events:
            await _subscribed_on_the_cluster(bus, [channel])
            await bus.publish(channel, {"n": 1})
            async with asyncio.timeout(10):
                assert await anext(events) == {"n": 1}
            await asyncio.to_thread(servers.restart_node, port)
            await _subscribed_on_the_cluster(bus, [channel])
            await bus.publish(channel, {"n": 2})
            async with asyncio.timeout(10):
                assert await anext(events) == {"n": 2}
        # Process-wide channels: the node the URL names goes away; the listener comes back (on
        # another node while that one is still away).
        async with bus.subscribe(media_uploaded_channel(keys)) as uploads:
            await asyncio.to_thread(servers.restart_node, servers.ports[0])
            assert await _published_until_heard(bus, media_uploaded_channel(keys), uploads) == {"id": 7}
        assert bus.backend.reconnects >= 2
    finally:
        await bus.disconnect()
        servers.stop()
