"""A broadcaster backend for Redis pub/sub that survives Redis restarts.

broadcaster's own RedisBackend stops listening for good when its connection drops;
this one reconnects with backoff and subscribes again to every channel it held,
so live subscriptions resume without the client noticing more than a gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from broadcaster import Event
from broadcaster._backends.base import BroadcastBackend
from redis import asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mediagraph.redis_pool import redis_client

log = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS = 2.0
# How long a blocked read waits before looking at the stop flag again.
POLL_SECONDS = 0.5
CLOSE_TIMEOUT_SECONDS = 2.0


class ResilientRedisBackend(BroadcastBackend):
    def __init__(self, url: str, *, max_connections: int = 100) -> None:
        self._url = url
        self._publisher = redis_client(url, max_connections=max_connections)
        self._channels: set[str] = set()
        self._pubsub: Any = None
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._listener: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.reconnects = 0
        self._stopping = False

    async def connect(self) -> None:
        self._listener = asyncio.create_task(self._listen_forever())

    async def disconnect(self) -> None:
        # Cancelling a task blocked in a pub/sub read can hang inside redis-py while it
        # closes the socket, so the listener polls and is asked to stop instead.
        self._stopping = True
        if self._listener is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._listener), POLL_SECONDS + CLOSE_TIMEOUT_SECONDS)
            except TimeoutError:
                self._listener.cancel()
        await self._close_pubsub()
        await self._publisher.aclose()

    async def subscribe(self, channel: str) -> None:
        await self.subscribe_many([channel])

    async def unsubscribe(self, channel: str) -> None:
        await self.unsubscribe_many([channel])

    async def subscribe_many(self, channels: list[str]) -> None:
        """One SUBSCRIBE for all of them: a source watching a hundred media waits one round trip."""
        async with self._lock:
            self._channels.update(channels)
            if self._pubsub is not None:
                with contextlib.suppress(RedisConnectionError, RedisTimeoutError):
                    await self._pubsub.subscribe(*channels)

    async def unsubscribe_many(self, channels: list[str]) -> None:
        async with self._lock:
            self._channels.difference_update(channels)
            if self._pubsub is not None:
                with contextlib.suppress(RedisConnectionError, RedisTimeoutError):
                    await self._pubsub.unsubscribe(*channels)

    async def publish(self, channel: str, message: Any) -> None:
        await self._publisher.publish(channel, message)

    async def next_published(self) -> Event:
        return await self._queue.get()

    async def _open_pubsub(self) -> None:
        async with self._lock:
            client = aioredis.Redis.from_url(self._url)
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            # A pubsub with no channel cannot listen; a private one keeps it open.
            await pubsub.subscribe(f"__mediagraph_keepalive__:{id(self)}", *self._channels)
            self._pubsub = pubsub

    async def _close_pubsub(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(pubsub.aclose(), CLOSE_TIMEOUT_SECONDS)

    async def _listen_forever(self) -> None:
        backoff = 0.05
        while not self._stopping:
            try:
                await self._open_pubsub()
                backoff = 0.05
                while not self._stopping:
                    message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=POLL_SECONDS)
                    if message is None or message["type"] != "message":
                        continue
                    channel = message["channel"].decode()
                    data = message["data"]
                    self._queue.put_nowait(
                        Event(channel=channel, message=data.decode() if isinstance(data, bytes) else data)
                    )
            except (RedisConnectionError, RedisTimeoutError, OSError) as error:
                if not self._stopping:
                    log.warning("pub/sub connection lost (%s); reconnecting", error)
            await self._close_pubsub()
            if self._stopping:
                return
            self.reconnects += 1
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
