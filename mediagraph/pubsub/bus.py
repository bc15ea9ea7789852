"""The event bus live fields subscribe to: broadcaster over Redis pub/sub, channels prefixed.

On a Redis Cluster, entity channels travel by sharded pub/sub (backend.py).

One Redis subscription per channel per process is shared by every local subscriber
(broadcaster's fan-out). Each subscriber gets a bounded mailbox instead of
broadcaster's unbounded queue, so a slow websocket costs at most `keep` events of
memory: the oldest are dropped, and with `keep=1` a subscriber always holds just the
newest state (what counters and rankings want).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from broadcaster import Broadcast, Event

from mediagraph.keys import KeySpace
from mediagraph.observability import metrics
from mediagraph.pubsub.backend import ResilientRedisBackend

# Events a subscriber may fall behind by before the oldest are dropped.
DEFAULT_KEEP = 256


def wire_payload(payload: object) -> str:
    """A payload as it travels on a channel, for publishers that batch PUBLISH in a pipeline."""
    return orjson.dumps(payload).decode()


class Mailbox(asyncio.Queue["Event | None"]):
    """A subscriber's queue that never blocks the shared listener: when full, the oldest event goes."""

    def __init__(self, keep: int) -> None:
        super().__init__(maxsize=keep)
        self.dropped = 0

    async def put(self, item: Event | None) -> None:
        self.put_nowait(item)

    def put_nowait(self, item: Event | None) -> None:
        if self.full():
            self.get_nowait()
            self.dropped += 1
            # A mailbox of one keeps the newest state: the older one was superseded, not lost.
            (metrics.PUSHES_COALESCED if self.maxsize == 1 else metrics.PUSHES_DROPPED).inc()
        super().put_nowait(item)


class Notices:
    """Which of several channels had a message since last taken, for sources that re-read state on any change.

    It stands in for a queue on every channel it watches: holding only channel names,
    it costs the same however busy they are.
    """

    def __init__(self) -> None:
        self.fired: set[str] = set()
        self.wake = asyncio.Event()

    async def put(self, item: Event | None) -> None:
        self.put_nowait(item)

    def put_nowait(self, item: Event | None) -> None:
        if item is not None:
            self.fired.add(item.channel)
            self.wake.set()

    def take(self) -> set[str]:
        fired, self.fired = self.fired, set()
        self.wake.clear()
        return fired


class BoundedBroadcast(Broadcast):
    @asynccontextmanager
    async def subscribe_bounded(self, channel: str, *, keep: int) -> AsyncIterator[Mailbox]:
        mailbox = Mailbox(keep)
        async with self.attach([channel], mailbox):
            yield mailbox

    @asynccontextmanager
    async def attach(self, channels: list[str], receiver: Any) -> AsyncIterator[None]:
        """Deliver what is published on `channels` to `receiver` (anything with `put`) while inside."""
        subscribers: dict[str, set[Any]] = self._subscribers
        backend: ResilientRedisBackend = self._backend  # type: ignore[assignment]
        added: list[str] = []
        try:
            new = [channel for channel in channels if not subscribers.get(channel)]
            if new:
                await backend.subscribe_many(new)
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # The Redis client can swallow a cancellation that lands during SUBSCRIBE;
                    # carrying on would leave the cancelled operation waiting forever.
                    raise asyncio.CancelledError
            for channel in channels:
                subscribers.setdefault(channel, set()).add(receiver)
                added.append(channel)
            yield
        finally:
            # Cancelled while the backend was still subscribing, the receiver was never added.
            released = []
            for channel in channels:
                members = subscribers.get(channel)
                if members is not None:
                    members.discard(receiver)
                if not members:
                    subscribers.pop(channel, None)
                    released.append(channel)
            if released:
                await backend.unsubscribe_many(released)


class EventBus:
    def __init__(self, redis_url: str, keys: KeySpace, *, max_connections: int = 100, cluster: bool = False) -> None:
        self.backend = ResilientRedisBackend(
            redis_url, max_connections=max_connections, cluster=cluster, is_sharded=keys.is_sharded
        )
        self._broadcast = BoundedBroadcast(backend=self.backend)
        self.keys = keys

    async def connect(self) -> None:
        await self._broadcast.connect()

    async def disconnect(self) -> None:
        await self._broadcast.disconnect()

    async def publish(self, channel: str, payload: object) -> None:
        """`channel` is a full channel name, built by the domain's `keys` module."""
        await self._broadcast.publish(channel, wire_payload(payload))

    def local_subscribers(self, channel: str) -> int:
        """How many subscribers in this process listen on `channel`."""
        return len(self._broadcast._subscribers.get(channel, ()))

    @asynccontextmanager
    async def notices(
        self, channels: list[str], *, min_interval: float, refresh_seconds: float | None = None
    ) -> AsyncIterator[AsyncIterator[set[str]]]:
        """The channels among `channels` that had a message, for sources that re-read state.

        First every channel at once (subscribed: read the current state now), then the
        ones that fired, at most once per `min_interval` seconds. With `refresh_seconds`,
        every channel again that often, so a message lost while the pub/sub connection
        was reconnecting delays a change by at most that long.
        """
        notices = Notices()
        async with self._broadcast.attach(channels, notices):
            yield _notices(notices, channels, min_interval, refresh_seconds)

    @asynccontextmanager
    async def subscribe(
        self, channel: str, *, keep: int = DEFAULT_KEEP, min_interval: float = 0.0
    ) -> AsyncIterator[AsyncIterator[Any]]:
        """Decoded payloads published on `channel` from now on.

        `keep=1` coalesces to the newest payload. With it, `min_interval` (seconds)
        spaces deliveries out and whatever arrives meanwhile replaces what waits, so a
        hot channel costs a subscriber a few pushes a second, always ending on the latest.
        """
        async with self._broadcast.subscribe_bounded(channel, keep=keep) as mailbox:
            yield _deliveries(mailbox, min_interval)


async def _deliveries(mailbox: Mailbox, min_interval: float) -> AsyncIterator[Any]:
    loop = asyncio.get_running_loop()
    next_allowed = 0.0
    while True:
        event = await mailbox.get()
        if min_interval > 0:
            wait = next_allowed - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
                # A state mailbox (keep=1) now holds whatever is newest: send that instead.
                if mailbox.maxsize == 1 and not mailbox.empty():
                    event = mailbox.get_nowait()
            next_allowed = loop.time() + min_interval
        if event is None:
            return
        yield orjson.loads(event.message)


async def _notices(
    notices: Notices, channels: list[str], min_interval: float, refresh_seconds: float | None
) -> AsyncIterator[set[str]]:
    loop = asyncio.get_running_loop()
    everything = set(channels)
    yield set(everything)
    next_refresh = loop.time() + refresh_seconds if refresh_seconds else None
    next_allowed = loop.time() + min_interval
    while True:
        due = next_refresh is not None and loop.time() >= next_refresh
        if not due:
            timeout = None if next_refresh is None else next_refresh - loop.time()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await notices.wake.wait()
        wait = next_allowed - loop.time()
        if wait > 0:
            # Whatever fires meanwhile joins this delivery.
            await asyncio.sleep(wait)
        fired = notices.take()
        if next_refresh is not None and loop.time() >= next_refresh:
            fired = set(everything)
            next_refresh = loop.time() + (refresh_seconds or 0)
        if fired:
            next_allowed = loop.time() + min_interval
            yield fired
