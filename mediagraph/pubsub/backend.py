"""A broadcaster backend for Redis pub/sub that survives Redis restarts, on one Redis or a cluster.

broadcaster's own RedisBackend stops listening for good when its connection drops;
this one reconnects with backoff and subscribes again to every channel it held,
so live subscriptions resume without the client noticing more than a gap.

Each channel is read through one *route*: a connection with its own listener.
- On one Redis, and for process-wide channels on a cluster, one route SUBSCRIBEs to them
  (a cluster forwards a classic PUBLISH to every node, so any node will do).
- On a cluster, entity channels are sharded (`KeySpace.is_sharded`): SPUBLISH reaches
  only the primary owning the channel's slot, so there is one route per primary, which
  SSUBSCRIBEs (one slot per command, as Redis requires) to the channels of its slots.
  When its node goes away (restart, failover), the route reloads the slot map on
  reconnecting and hands channels whose slot moved to their new owner's route.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Iterable
from typing import Any

from broadcaster import Event
from broadcaster._backends.base import BroadcastBackend
from redis import asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mediagraph.redis_pool import redis_client

log = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 2.0
# How long a blocked read waits before looking at the stop flag again.
POLL_SECONDS = 0.5
CLOSE_TIMEOUT_SECONDS = 2.0
CLASSIC = "classic"
LOST = (RedisConnectionError, RedisTimeoutError, OSError)


class _Route:
    """One pub/sub connection and the channels read through it (SUBSCRIBE or SSUBSCRIBE)."""

    def __init__(self, backend: ResilientRedisBackend, name: str, url: str, *, sharded: bool) -> None:
        self.backend = backend
        self.name = name
        self.url = url
        self.sharded = sharded
        self.channels: set[str] = set()
        self.pubsub: Any = None
        self.task: asyncio.Task[None] | None = None
        self.lock = asyncio.Lock()
        self.opened = asyncio.Event()

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.create_task(self._listen_forever())

    async def add(self, channels: list[str]) -> None:
        async with self.lock:
            self.channels.update(channels)
            if self.pubsub is not None:
                with contextlib.suppress(*LOST):
                    await self._subscribe(channels)
        if self.task is None:
            self.start()
            # A new route opens in the background; give it a moment so that what is
            # published right after subscribing is heard (it subscribes these as it opens).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.opened.wait(), CLOSE_TIMEOUT_SECONDS)

    async def remove(self, channels: list[str]) -> None:
        async with self.lock:
            self.channels.difference_update(channels)
            if self.pubsub is not None:
                with contextlib.suppress(*LOST):
                    if self.sharded:
                        for group in _by_slot(channels):
                            await self.pubsub.sunsubscribe(*group)
                    else:
                        await self.pubsub.unsubscribe(*channels)

    async def _subscribe(self, channels: Iterable[str]) -> None:
        if self.sharded:
            for group in _by_slot(channels):
                await self.pubsub.ssubscribe(*group)
        else:
            await self.pubsub.subscribe(*channels)

    async def _open(self) -> None:
        if self.sharded:
            if self.opened.is_set():
                # Reopening after the node went away: its slots may have moved (a failover).
                await self.backend.reroute(self)
        elif self.backend.on_cluster:
            # Classic messages reach every node: after losing one, listen on another.
            self.url = self.backend.any_node_url(avoid=self.url if self.backend.reconnects else None)
        async with self.lock:
            pubsub = aioredis.Redis.from_url(self.url).pubsub(ignore_subscribe_messages=True)
            if self.sharded:
                # Channels come and go; the connection is read even while it holds none.
                await pubsub.connect()  # type: ignore[no-untyped-call]
            else:
                # A pubsub with no channel cannot listen; a private one keeps it open.
                await pubsub.subscribe(f"__mediagraph_keepalive__:{id(self)}")
            self.pubsub = pubsub
            if self.channels:
                await self._subscribe(self.channels)
        self.opened.set()

    async def close(self) -> None:
        pubsub, self.pubsub = self.pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pubsub.aclose(), CLOSE_TIMEOUT_SECONDS)

    async def _listen_forever(self) -> None:
        backoff = 0.05
        while not self.backend.stopping:
            try:
                await self._open()
                backoff = 0.05
                while not self.backend.stopping:
                    message = await self.pubsub.get_message(ignore_subscribe_messages=True, timeout=POLL_SECONDS)
                    if message is None or message["type"] not in ("message", "smessage"):
                        continue
                    data = message["data"]
                    self.backend.deliver(
                        Event(
                            channel=message["channel"].decode(),
                            message=data.decode() if isinstance(data, bytes) else data,
                        )
                    )
            except (*LOST, ResponseError) as error:
                # ResponseError: MOVED for a slot that changed owner; the reroute on reopening fixes it.
                if not self.backend.stopping:
                    log.warning("pub/sub connection %s lost (%s); reconnecting", self.name, error)
            await self.close()
            if self.backend.stopping:
                return
            self.backend.reconnects += 1
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)


def _by_slot(channels: Iterable[str]) -> list[list[str]]:
    groups: dict[int, list[str]] = {}
    for channel in channels:
        groups.setdefault(key_slot(channel.encode()), []).append(channel)
    return list(groups.values())


class ResilientRedisBackend(BroadcastBackend):
    def __init__(
        self,
        url: str,
        *,
        max_connections: int = 100,
        cluster: bool = False,
        is_sharded: Callable[[str], bool] = lambda channel: False,
    ) -> None:
        self._url = url
        self._cluster = cluster
        self._is_sharded = is_sharded
        self._publisher = redis_client(url, max_connections=max_connections, cluster=cluster)
        self._routes: dict[str, _Route] = {CLASSIC: _Route(self, CLASSIC, url, sharded=False)}
        self._route_of: dict[str, _Route] = {}
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._lock = asyncio.Lock()
        self.reconnects = 0
        self.stopping = False

    @property
    def _channels(self) -> set[str]:
        """Every channel subscribed to, over all routes."""
        return set(self._route_of)

    async def connect(self) -> None:
        if self._cluster:
            await self._cluster_client.initialize()
        self._routes[CLASSIC].start()

    async def disconnect(self) -> None:
        # Cancelling a task blocked in a pub/sub read can hang inside redis-py while it
        # closes the socket, so the listeners poll and are asked to stop instead.
        self.stopping = True
        for route in self._routes.values():
            if route.task is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(route.task), POLL_SECONDS + CLOSE_TIMEOUT_SECONDS)
                except TimeoutError:
                    route.task.cancel()
            await route.close()
        await self._publisher.aclose()

    async def subscribe(self, channel: str) -> None:
        await self.subscribe_many([channel])

    async def unsubscribe(self, channel: str) -> None:
        await self.unsubscribe_many([channel])

    async def subscribe_many(self, channels: list[str]) -> None:
        """One SUBSCRIBE for all of them (one per slot when sharded): a source watching a
        hundred media waits one round trip per route."""
        async with self._lock:
            for route, group in self._group(channels, placing=True).items():
                await route.add(group)

    async def unsubscribe_many(self, channels: list[str]) -> None:
        async with self._lock:
            for route, group in self._group(channels, placing=False).items():
                for channel in group:
                    self._route_of.pop(channel, None)
                await route.remove(group)

    async def publish(self, channel: str, message: Any) -> None:
        command = "SPUBLISH" if self._is_sharded(channel) else "PUBLISH"
        await self._publisher.execute_command(command, channel, message)  # type: ignore[no-untyped-call]

    async def next_published(self) -> Event:
        return await self._queue.get()

    def deliver(self, event: Event) -> None:
        self._queue.put_nowait(event)

    @property
    def on_cluster(self) -> bool:
        return self._cluster

    def any_node_url(self, *, avoid: str | None) -> str:
        """A primary's URL, another than `avoid` when there is one (the configured node at first)."""
        if avoid is None:
            return self._url
        urls = [f"redis://{node.host}:{node.port}/0" for node in self._cluster_client.get_primaries()]
        others = [url for url in urls if url != avoid]
        return random.choice(others or urls or [self._url])

    @property
    def _cluster_client(self) -> RedisCluster:
        return self._publisher  # type: ignore[return-value]

    def _group(self, channels: list[str], *, placing: bool) -> dict[_Route, list[str]]:
        groups: dict[_Route, list[str]] = {}
        for channel in channels:
            route = self._route_of.get(channel)
            if route is None:
                if not placing:
                    continue
                route = self._place(channel)
                self._route_of[channel] = route
            groups.setdefault(route, []).append(channel)
        return groups

    def _place(self, channel: str) -> _Route:
        """The route that reads `channel`: the classic one, or its slot owner's."""
        if not (self._cluster and self._is_sharded(channel)):
            return self._routes[CLASSIC]
        node = self._cluster_client.get_node_from_key(channel)
        if node is None:
            raise RedisConnectionError(f"no cluster node serves the slot of {channel}")
        route = self._routes.get(node.name)
        if route is None:
            route = _Route(self, node.name, f"redis://{node.host}:{node.port}/0", sharded=True)
            self._routes[node.name] = route
        return route

    async def reroute(self, route: _Route) -> None:
        """After `route` lost its node: reload the slot map and move channels whose slot moved."""
        with contextlib.suppress(*LOST):
            await self._cluster_client.nodes_manager.initialize()
        async with self._lock:
            moved: dict[_Route, list[str]] = {}
            for channel in list(route.channels):
                owner = self._place(channel)
                if owner is not route:
                    route.channels.discard(channel)
                    self._route_of[channel] = owner
                    moved.setdefault(owner, []).append(channel)
            for owner, group in moved.items():
                await owner.add(group)
