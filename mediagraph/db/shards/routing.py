"""Keeps a process's cached shard map current: reload on a pub/sub notice, and periodically.

The notice makes a move visible to readers within milliseconds; the periodic reload
covers a notice lost while Redis was away. Writers never rely on either: they check
residency on the shard itself (see `db.residency`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from mediagraph.db.engines import Databases
from mediagraph.keys.shards import shard_routing_channel
from mediagraph.pubsub.bus import EventBus

log = logging.getLogger(__name__)


# The watcher's task, named so that what it does can be told from what requests do.
TASK_NAME = "routing-watcher"


class RoutingWatcher:
    def __init__(self, databases: Databases, bus: EventBus, *, refresh_seconds: float) -> None:
        self._databases = databases
        self._bus = bus
        self._refresh_seconds = refresh_seconds
        self._notice = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=TASK_NAME)

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                async with self._bus.subscribe(shard_routing_channel(self._bus.keys), keep=1) as notices:
                    listener = asyncio.create_task(self._listen(notices))
                    try:
                        await self._reload_forever()
                    finally:
                        listener.cancel()
            except asyncio.CancelledError:
                raise
            except Exception:
                if self._stopping:
                    return
                log.exception("routing watcher failed; restarting")
                await asyncio.sleep(1)

    async def _listen(self, notices: AsyncIterator[Any]) -> None:
        async for _ in notices:
            self._notice.set()

    async def _reload_forever(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._notice.wait(), self._refresh_seconds)
            self._notice.clear()
            try:
                await self._databases.reload_router()
            except Exception as error:
                log.warning("could not reload the shard map: %s", error)


async def announce_routing_change(bus: EventBus) -> None:
    await bus.publish(shard_routing_channel(bus.keys), {"changed": True})
