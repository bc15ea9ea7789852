"""Hot writes straight through asyncpg: one prepared statement each, no ORM session.

A write through an ORM session costs BEGIN, its statements one round trip each, and
COMMIT, plus the ORM's statement building. The hot writes (`db/__init__.py` names them)
are each one statement instead, run outside any explicit transaction, so the statement
is its own transaction; asyncpg prepares it once per connection. Unlike a read, a write
is never repeated here when its connection dies: it may have committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from mediagraph.observability import metrics
from mediagraph.settings import Settings

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
        if self._pool is None:
            raise RuntimeError("the write pool is not started")
        for observe in self.observers:
            observe(sql)
        async with self._turns:
            try:
                return await self._pool.fetchrow(sql, *args)
            except Exception as error:
                metrics.count_postgres_error("main", error, disconnect=isinstance(error, CONNECTION_LOST))
                raise


async def _keep_session(connection: asyncpg.Connection) -> None:
    """Released connections are not reset: single statements leave no session state behind."""
