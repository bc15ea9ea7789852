"""The event bus live fields subscribe to: broadcaster over Redis pub/sub, channels prefixed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson
from broadcaster import Broadcast

from mediagraph.keys import KeySpace
from mediagraph.subscriptions.backend import ResilientRedisBackend


class EventBus:
    def __init__(self, redis_url: str, keys: KeySpace) -> None:
        self.backend = ResilientRedisBackend(redis_url)
        self._broadcast = Broadcast(backend=self.backend)
        self.keys = keys

    async def connect(self) -> None:
        await self._broadcast.connect()

    async def disconnect(self) -> None:
        await self._broadcast.disconnect()

    async def publish(self, channel: str, payload: object) -> None:
        """`channel` is a full channel name, built by the domain's `keys` module."""
        await self._broadcast.publish(channel, orjson.dumps(payload).decode())

    @asynccontextmanager
    async def subscribe(self, channel: str) -> AsyncIterator[AsyncIterator[object]]:
        async with self._broadcast.subscribe(channel) as subscriber:
            yield _decoded(subscriber)


async def _decoded(subscriber: object) -> AsyncIterator[object]:
    async for event in subscriber:  # type: ignore[attr-defined]
        if event is not None:
            yield orjson.loads(event.message)
