"""Hot writes straight through asyncpg: prepared statements, no ORM session.

A write through an ORM session costs BEGIN, its statements one round trip each, and
COMMIT, plus the ORM's statement building. The hot writes (`db/__init__.py` names them)
are one statement instead, run outside any explicit transaction, so the statement is its
own transaction; asyncpg prepares it once per connection. The requests of one moment (a
turn of the event loop, `turns.py`) share a statement (`StepWrites`), so they share a
commit and its WAL flush. Unlike a
read, a write is never repeated here when its connection dies: it may have committed.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

import asyncpg
from sqlalchemy.engine import make_url

from mediagraph.observability import metrics
from mediagraph.settings import Settings
from mediagraph.turns import after_next_turn

ItemT = TypeVar("ItemT")
BatchesT = TypeVar("BatchesT")
ResultT = TypeVar("ResultT")

CONNECTION_LOST = (asyncpg.ConnectionDoesNotExistError, asyncpg.InterfaceError, ConnectionError)


class WritePool:
    """An asyncpg pool for single-statement writes; opens connections as load needs them."""

    def __init__(self, url: str, settings: Settings) -> None:
        self.dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self.max_size = settings.write_pool_size
        self._pool: asyncpg.Pool | None = None
        # First come, first served, as in the read pool (`db/reads.py`).
        self._turns = asyncio.Semaphore(self.max_size)
        # Called with each statement before it runs: query-count tests listen here.
        self.observers: list[Callable[[str], None]] = []

    async def start(self) -> None:
        if self._pool is not None:
            raise RuntimeError("the pool is already started")
        self._pool = await asyncpg.create_pool(
            self.dsn, min_size=0, max_size=self.max_size, timeout=5, command_timeout=30, reset=_keep_session
        )

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def usage(self) -> tuple[int, int]:
        """Connections (in use, idle) of the pool."""
        if self._pool is None:
            return 0, 0
        idle = self._pool.get_idle_size()
        return self._pool.get_size() - idle, idle

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        """The one row a statement returns (None when it returns none)."""
        rows = await self.fetch(sql, *args)
        return rows[0] if rows else None

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        if self._pool is None:
            raise RuntimeError("the write pool is not started")
        for observe in self.observers:
            observe(sql)
        async with self._turns:
            try:
                rows: list[asyncpg.Record] = await self._pool.fetch(sql, *args)
            except Exception as error:
                metrics.count_postgres_error("main", error, disconnect=isinstance(error, CONNECTION_LOST))
                raise
        return rows


class StepWrites(Generic[ItemT, ResultT]):
    """Writes requests ask for at about the same moment, run together a turn of the event loop later (`turns.py`).

    Each hot write is a transaction of its own, and a commit waits for its WAL flush: the
    requests of one moment written by one statement share one commit (as `db/reads.py`
    merges reads). `run` gets the items in order and answers each with its result or the
    exception that request must raise.
    """

    def __init__(self, run: Callable[[list[ItemT]], Awaitable[list[ResultT | Exception]]]) -> None:
        self._run = run
        self._waiting: list[tuple[ItemT, asyncio.Future[ResultT]]] = []
        self._running: set[asyncio.Task[None]] = set()

    async def ask(self, item: ItemT) -> ResultT:
        loop = asyncio.get_running_loop()
        if not self._waiting:
            after_next_turn(loop, self._dispatch)
        future: asyncio.Future[ResultT] = loop.create_future()
        self._waiting.append((item, future))
        return await future

    def _dispatch(self) -> None:
        waiting, self._waiting = self._waiting, []
        task = asyncio.get_running_loop().create_task(self._settle(waiting))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _settle(self, waiting: list[tuple[ItemT, asyncio.Future[ResultT]]]) -> None:
        try:
            results = await self._run([item for item, _ in waiting])
        except Exception as error:
            for _, future in waiting:
                if not future.done():
                    future.set_exception(error)
            return
        for (_, future), result in zip(waiting, results, strict=True):
            if future.done():
                continue
            if isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(result)


async def _keep_session(connection: asyncpg.Connection) -> None:
    """Released connections are not reset: single statements leave no session state behind."""


def rounds_without_repeats(items: Sequence[ItemT], key: Callable[[ItemT], Hashable]) -> list[list[int]]:
    """Positions of `items` in rounds where no key repeats, in order: one statement may touch
    a row only once, so a second request for the same row waits for the next round."""
    rounds: list[list[int]] = []
    seen: dict[Hashable, int] = {}
    for at, item in enumerate(items):
        wanted = key(item)
        number = seen.get(wanted, 0)
        seen[wanted] = number + 1
        if number == len(rounds):
            rounds.append([])
        rounds[number].append(at)
    return rounds


class PerPool(Generic[BatchesT]):
    """One object per write pool for the process (a domain's step batches), made on first use."""

    def __init__(self, make: Callable[[WritePool], BatchesT]) -> None:
        self._make = make
        self._made: weakref.WeakKeyDictionary[WritePool, BatchesT] = weakref.WeakKeyDictionary()

    def __call__(self, writes: WritePool) -> BatchesT:
        found = self._made.get(writes)
        if found is None:
            found = self._made[writes] = self._make(writes)
        return found
