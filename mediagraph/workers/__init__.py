"""Background workers: run in-process by `serve`, or one per process by `mediagraph worker NAME`.

Each domain's worker module exposes `NAME`, `async def run(services, stop)`, which
loops until `stop` is set, and `async def lag(services)`: how far behind its queues are,
read from the stores, so any process can tell (the metrics do). Workers coordinate
through Redis consumer groups and database locks, so any number of copies may run at
once; while one runs, its supervisor renews the worker's heartbeat in Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from types import ModuleType

from mediagraph.keys.workers import worker_heartbeat
from mediagraph.observability.metrics import Lag
from mediagraph.services import Services

log = logging.getLogger(__name__)

WorkerRun = Callable[[Services, asyncio.Event], Awaitable[None]]
WorkerLag = Callable[[Services], Awaitable[list[Lag]]]

# One module per domain that has background work, e.g. "mediagraph.workers.views".
WORKER_MODULES: tuple[str, ...] = (
    "mediagraph.workers.views",
    "mediagraph.workers.nicknames",
    "mediagraph.workers.feeds",
    "mediagraph.workers.hot",
    "mediagraph.workers.playback",
    "mediagraph.workers.leaderboards",
)

RESTART_DELAY_SECONDS = 1.0
HEARTBEAT_SECONDS = 5.0
# A heartbeat not renewed for this long expires: no process runs the worker.
HEARTBEAT_EXPIRY_SECONDS = 20.0


@dataclass(frozen=True)
class Heartbeat:
    running: bool
    age_seconds: float | None = None


def _modules() -> list[ModuleType]:
    return [importlib.import_module(module_name) for module_name in WORKER_MODULES]


def registered_workers() -> dict[str, WorkerRun]:
    return {module.NAME: module.run for module in _modules()}


def registered_lags() -> dict[str, WorkerLag]:
    return {module.NAME: module.lag for module in _modules()}


async def measure_lags(services: Services) -> list[Lag]:
    """Every worker's backlog; a worker whose stores cannot answer now is left out (and logged)."""
    lags = registered_lags()
    readings = await asyncio.gather(*(lag(services) for lag in lags.values()), return_exceptions=True)
    measured: list[Lag] = []
    for name, reading in zip(lags, readings, strict=True):
        if isinstance(reading, BaseException):
            log.warning("cannot measure the %s worker's lag: %s", name, reading)
        else:
            measured.extend(reading)
    return measured


async def worker_heartbeats(services: Services) -> dict[str, Heartbeat]:
    """Whether some process runs each worker now, from the heartbeats in Redis."""
    names = list(registered_workers())
    beats = await services.redis.mget([worker_heartbeat(services.keys, name) for name in names])
    now_ms = time.time() * 1000
    return {
        name: Heartbeat(True, max(0.0, (now_ms - int(beat)) / 1000)) if beat is not None else Heartbeat(False)
        for name, beat in zip(names, beats, strict=True)
    }


async def _beat(name: str, services: Services, running: asyncio.Event) -> None:
    key = worker_heartbeat(services.keys, name)
    while True:
        await running.wait()
        try:
            await services.redis.set(key, int(time.time() * 1000), px=int(HEARTBEAT_EXPIRY_SECONDS * 1000))
        except Exception as error:
            log.debug("worker %s heartbeat not renewed: %s", name, error)
        await asyncio.sleep(HEARTBEAT_SECONDS)


async def supervise(name: str, run: WorkerRun, services: Services, stop: asyncio.Event) -> None:
    """Keep a worker alive: a crash is logged and the worker restarts; only `stop` ends it.

    The heartbeat is renewed while the worker runs, not while it waits to restart.
    """
    running = asyncio.Event()
    heartbeat = asyncio.create_task(_beat(name, services, running), name=f"worker:{name}:heartbeat")
    try:
        while not stop.is_set():
            running.set()
            try:
                await run(services, stop)
            except asyncio.CancelledError:
                raise
            except Exception:
                running.clear()
                log.exception("worker %s crashed; restarting", name)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), RESTART_DELAY_SECONDS)
    finally:
        heartbeat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await heartbeat


@contextlib.asynccontextmanager
async def run_workers(services: Services, *, enabled: bool, names: list[str] | None = None) -> AsyncIterator[None]:
    if not enabled:
        yield
        return
    workers = registered_workers()
    selected = {name: workers[name] for name in (names or workers)}
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(supervise(name, run, services, stop), name=f"worker:{name}")
        for name, run in selected.items()
    ]
    try:
        yield
    finally:
        stop.set()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=5)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
