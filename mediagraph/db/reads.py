"""Hot reads straight through asyncpg: prepared statements, no ORM session, no transaction.

A lookup by key through an ORM session costs a pool ping, BEGIN, the query and
ROLLBACK, plus the ORM's statement building and row processing: several times the
query itself. The loaders and listings every page runs read through here instead.
Rows become detached model instances (`db/rows.py`), so code written against the
models (attribute access, `session.merge`) cannot tell them from rows a session loaded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

import asyncpg
from sqlalchemy.engine import make_url

from mediagraph.db.hot_rows import HotRows
from mediagraph.db.rows import Where
from mediagraph.ids import MAX_ID
from mediagraph.observability import metrics
from mediagraph.settings import Settings
from mediagraph.turns import after_next_turn

WantedT = TypeVar("WantedT")
ResultT = TypeVar("ResultT")
BatchesT = TypeVar("BatchesT", bound="StepBatches[Any, Any]")

# The highest id a page may hold when it starts from the top: ids never exceed it.
LAST_ID = MAX_ID
MAX_BATCHERS = 1000

# Errors that mean the connection died (a restarted server), not that the query is wrong.
CONNECTION_LOST = (asyncpg.ConnectionDoesNotExistError, asyncpg.InterfaceError, ConnectionError)


class ReadPool:
    """An asyncpg pool for single-statement reads; opens connections as load needs them."""

    def __init__(self, url: str, settings: Settings) -> None:
        self.dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self.max_size = settings.read_pool_size
        self._pool: asyncpg.Pool | None = None
        # asyncpg's pool lets a newcomer take a just-released connection ahead of
        # those already waiting, who then queue again at the back: under load a
        # few requests wait many times longer than the rest. This semaphore is
        # first come, first served, and only lets through as many as there are
        # connections, so the pool itself never has anyone waiting.
        self._turns = asyncio.Semaphore(self.max_size)
        # Called with each statement before it runs: query-count tests listen here.
        self.observers: list[Callable[[str], None]] = []
        # Batchers by statement (and arguments, for pages); bounded, as page filters vary.
        self._batches: dict[Any, StepBatches[Any, Any]] = {}
        self.hot = HotRows(seconds=settings.hot_read_seconds, max_entries=settings.hot_read_entries)

    async def start(self) -> None:
        if self._pool is not None:
            raise RuntimeError("the pool is already started")
        # Generic plans: each statement is planned once per connection. Ours are index walks
        # whose best plan does not depend on the values; PostgreSQL's default re-plans those
        # whose generic estimate looks worse (a LIMIT or row comparison on parameters), and a
        # page then spends longer planning than running (0.3 ms of 0.5; see BENCHMARKS.md).
        self._pool = await asyncpg.create_pool(
            self.dsn,
            min_size=0,
            max_size=self.max_size,
            timeout=5,
            command_timeout=30,
            reset=_keep_session,
            server_settings={"plan_cache_mode": "force_generic_plan"},
        )

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        if self._pool is None:
            raise RuntimeError("the read pool is not started")
        for observe in self.observers:
            observe(sql)
        async with self._turns:
            try:
                rows: list[asyncpg.Record] = await self._pool.fetch(sql, *args)
            except CONNECTION_LOST as lost:
                metrics.count_postgres_error("main", lost, disconnect=True)
                # A read is safe to repeat; the pool replaces the dead connection.
                try:
                    rows = await self._pool.fetch(sql, *args)
                except Exception as error:
                    metrics.count_postgres_error("main", error, disconnect=isinstance(error, CONNECTION_LOST))
                    raise
            except Exception as error:
                metrics.count_postgres_error("main", error, disconnect=False)
                raise
        return rows

    def usage(self) -> tuple[int, int]:
        """Connections (in use, idle) of the pool."""
        if self._pool is None:
            return 0, 0
        idle = self._pool.get_idle_size()
        return self._pool.get_size() - idle, idle

    async def fetch_keyed(self, sql: str, key: str, keys: Sequence[Hashable]) -> dict[Any, asyncpg.Record]:
        """Rows of `sql` (`... WHERE <key> = ANY($1)`) by key, merged with other requests' lookups."""
        return await self.batches(sql, lambda: KeyedBatches(self, sql, key)).ask(keys)

    async def fetch_newest_page(
        self, select: str, where: Where, *, before: int | None, limit: int
    ) -> list[asyncpg.Record]:
        """`select WHERE where [AND id < before] ORDER BY id DESC LIMIT limit`, merged with other requests' pages."""
        batches = self.batches(
            (select, where.sql(), where.key(), limit), lambda: NewestPages(self, select, where, limit)
        )
        upto = before - 1 if before is not None else LAST_ID
        return await batches.ask(upto)

    def batches(self, key: Hashable, make: Callable[[], BatchesT]) -> BatchesT:
        """The batcher of `key` (a statement and whatever else its rows depend on), made on first use."""
        batches = self._batches.get(key)
        if batches is None:
            if len(self._batches) >= MAX_BATCHERS:
                self._forget_oldest_idle()
            batches = self._batches[key] = make()
        return batches  # type: ignore[return-value]

    def _forget_oldest_idle(self) -> None:
        # Not all of them: one gathering asks would see its next ask start a second
        # batcher of the same key, and the batch's reads split over two statements.
        for key, batches in self._batches.items():
            if batches.idle:
                del self._batches[key]
                return


class StepBatches(Generic[WantedT, ResultT]):
    """Reads requests make at about the same moment, run together a turn of the event loop later.

    Requests running at the same time each send their own statement: a round trip, and
    a system call on each side that costs more than the read itself. Here what they ask
    from the first ask until the loop has turned once more (`turns.py`) goes out in as
    few statements as `_run` needs. Only reads whose rows do not depend on who asks may go
    through here (rows by id, pages of media; never "did the viewer bookmark it").
    """

    def __init__(self, reads: ReadPool) -> None:
        self.reads = reads
        self._waiting: list[tuple[WantedT, asyncio.Future[ResultT]]] = []
        self._running: set[asyncio.Task[None]] = set()

    @property
    def idle(self) -> bool:
        """Nothing asked waits to be sent."""
        return not self._waiting

    async def ask(self, wanted: WantedT) -> ResultT:
        loop = asyncio.get_running_loop()
        if not self._waiting:
            after_next_turn(loop, self._dispatch)
        future: asyncio.Future[ResultT] = loop.create_future()
        self._waiting.append((wanted, future))
        return await future

    def _dispatch(self) -> None:
        waiting, self._waiting = self._waiting, []
        for group in self._groups(waiting):
            task = asyncio.get_running_loop().create_task(self._settle(group))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    def _groups(
        self, waiting: list[tuple[WantedT, asyncio.Future[ResultT]]]
    ) -> list[list[tuple[WantedT, asyncio.Future[ResultT]]]]:
        return [waiting]

    async def _settle(self, group: list[tuple[WantedT, asyncio.Future[ResultT]]]) -> None:
        try:
            results = await self._run([wanted for wanted, _ in group])
        except Exception as error:
            for _, future in group:
                if not future.done():
                    future.set_exception(error)
            return
        for (_, future), result in zip(group, results, strict=True):
            if not future.done():
                future.set_result(result)

    async def _run(self, wanted: list[WantedT]) -> list[ResultT]:
        raise NotImplementedError


class KeyedBatches(StepBatches[Sequence[Hashable], dict[Any, asyncpg.Record]]):
    """Lookups by key, merged into one `= ANY($1)` statement per batch (at most MAX_KEYS keys each)."""

    MAX_KEYS = 1000

    def __init__(self, reads: ReadPool, sql: str, key: str) -> None:
        super().__init__(reads)
        self.sql = sql
        self.key = key

    def _groups(self, waiting: list[Any]) -> list[list[Any]]:
        groups: list[list[Any]] = [[]]
        size = 0
        for entry in waiting:
            if groups[-1] and size + len(entry[0]) > self.MAX_KEYS:
                groups.append([])
                size = 0
            groups[-1].append(entry)
            size += len(entry[0])
        return groups

    async def _run(self, wanted: list[Sequence[Hashable]]) -> list[dict[Any, asyncpg.Record]]:
        keys = list(dict.fromkeys(key for keys in wanted for key in keys))
        found = {row[self.key]: row for row in await self.reads.fetch(self.sql, keys)}
        return [{key: found[key] for key in keys if key in found} for keys in wanted]


class StatementBatches(StepBatches[WantedT, list[asyncpg.Record]]):
    """Batches read by one statement, `sql`, whose last parameters (`args`) all of them share."""

    def __init__(self, reads: ReadPool, sql: str, args: tuple[Any, ...] = ()) -> None:
        super().__init__(reads)
        self.sql = sql
        self.args = args


class SameRead(StatementBatches[None]):
    """One statement with fixed arguments, asked by several requests of one batch: read once for all."""

    async def _run(self, wanted: list[None]) -> list[list[asyncpg.Record]]:
        rows = await self.reads.fetch(self.sql, *self.args)
        return [rows] * len(wanted)


class SlottedPages(StatementBatches[WantedT]):
    """Pages that one statement reads for every distinct ask of the batch at once: its first
    parameters come from the asks (`_parameters`, e.g. arrays to `unnest ... WITH ORDINALITY`),
    and each row says in `slot` which ask (1, 2, ...) it belongs to."""

    def _parameters(self, asks: list[WantedT]) -> list[Any]:
        raise NotImplementedError

    async def _run(self, wanted: list[WantedT]) -> list[list[asyncpg.Record]]:
        asks = list(dict.fromkeys(wanted))
        pages: list[list[asyncpg.Record]] = [[] for _ in asks]
        for row in await self.reads.fetch(self.sql, *self._parameters(asks), *self.args):
            pages[row["slot"] - 1].append(row)
        by_ask = dict(zip(asks, pages, strict=True))
        return [by_ask[ask] for ask in wanted]


class NewestPages(SlottedPages[int]):
    """Newest-first pages (`ORDER BY id DESC`) of one listing, whatever page each request wants.

    Each request gives the highest id its page may hold; one statement pages from all of
    them at once (`unnest` of those ids, LATERAL the page query), an index range scan each.
    """

    def __init__(self, reads: ReadPool, select: str, where: Where, limit: int) -> None:
        sql = (
            "SELECT t.*, p.slot FROM unnest($1::bigint[]) WITH ORDINALITY AS p(upto, slot) "
            f"CROSS JOIN LATERAL ({select} WHERE {where.sql(first=3)} AND id <= p.upto "
            "ORDER BY id DESC LIMIT $2) AS t ORDER BY p.slot, t.id DESC"
        )
        super().__init__(reads, sql, where.args)
        self.limit = limit

    def _parameters(self, asks: list[int]) -> list[Any]:
        return [asks, self.limit]


async def _keep_session(connection: asyncpg.Connection) -> None:
    """Released connections are not reset: single statements outside transactions leave no
    session state behind, and asyncpg's default reset is a second round trip per read."""
