"""Background workers: run in-process by `serve`, or one per process by `mediagraph worker NAME`.

Each domain's worker module exposes `NAME` and `async def run(services, stop)`, which
loops until `stop` is set. Workers coordinate through Redis consumer groups and
database locks, so any number of copies may run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from mediagraph.services import Services

log = logging.getLogger(__name__)

WorkerRun = Callable[[Services, asyncio.Event], Awaitable[None]]

# One module per domain that has background work, e.g. "mediagraph.workers.views".
WORKER_MODULES: tuple[str, ...] = (
    "mediagraph.workers.views",
    "mediagraph.workers.nicknames",
    "mediagraph.workers.feeds",
    "mediagraph.workers.hot",
    "mediagraph.workers.playback",
)

RESTART_DELAY_SECONDS = 1.0


def registered_workers() -> dict[str, WorkerRun]:
    workers: dict[str, WorkerRun] = {}
    for module_name in WORKER_MODULES:
        module = importlib.import_module(module_name)
        workers[module.NAME] = module.run
    return workers


async def supervise(name: str, run: WorkerRun, services: Services, stop: asyncio.Event) -> None:
    """Keep a worker alive: a crash is logged and the worker restarts; only `stop` ends it."""
    while not stop.is_set():
        try:
            await run(services, stop)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("worker %s crashed; restarting", name)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), RESTART_DELAY_SECONDS)


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
