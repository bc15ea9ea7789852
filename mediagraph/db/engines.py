"""Connection pools for the main database and every physical shard."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import event, text
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from mediagraph.db.endpoints import Endpoints
from mediagraph.db.reads import ReadPool
from mediagraph.db.shards.router import ShardRouter
from mediagraph.db.writes import WritePool
from mediagraph.observability import metrics
from mediagraph.settings import Settings


async def ping(engine: AsyncEngine) -> None:
    """Raises unless the database answers a trivial query."""
    async with engine.connect() as connection:
        await connection.execute(text("SELECT 1"))


@dataclass(frozen=True)
class PoolUsage:
    database: str
    pool: str
    in_use: int
    idle: int


def make_engine(url: str, settings: Settings, *, name: str = "main") -> AsyncEngine:
    """An engine for one database; `name` (main, shard-N) labels its errors in the metrics."""
    engine = create_async_engine(
        url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        pool_pre_ping=True,
        # Fail a request quickly instead of hanging on a shard that is down.
        connect_args={"timeout": 5, "command_timeout": 30},
    )

    def count_error(context: ExceptionContext) -> None:
        metrics.count_postgres_error(name, context.original_exception, disconnect=context.is_disconnect)

    event.listen(engine.sync_engine, "handle_error", count_error)
    return engine


def _engine_usage(database: str, engine: AsyncEngine) -> PoolUsage:
    pool = engine.pool
    checked_out = getattr(pool, "checkedout", None)
    checked_in = getattr(pool, "checkedin", None)
    return PoolUsage(
        database, "orm", int(checked_out()) if checked_out else 0, int(checked_in()) if checked_in else 0
    )


class Databases:
    def __init__(self, endpoints: Endpoints, settings: Settings) -> None:
        self.main = make_engine(endpoints.database_url, settings)
        self.shards = [
            make_engine(url, settings, name=f"shard-{number}") for number, url in enumerate(endpoints.shard_urls)
        ]
        self.main_sessions = async_sessionmaker(self.main, expire_on_commit=False)
        self.shard_sessions = [async_sessionmaker(engine, expire_on_commit=False) for engine in self.shards]
        self.router = ShardRouter(settings.logical_shards, len(self.shards))
        # Hot single-statement reads (loaders, listings) skip the ORM session: see db/reads.py.
        self.main_reads = ReadPool(endpoints.database_url, settings)
        # The hot writes, one prepared statement each: see db/writes.py.
        self.main_writes = WritePool(endpoints.database_url, settings)

    def main_session(self) -> AsyncSession:
        return self.main_sessions()

    def shard_session(self, physical_shard: int) -> AsyncSession:
        return self.shard_sessions[physical_shard]()

    async def start(self) -> None:
        await self.main_reads.start()
        await self.main_writes.start()
        await self.reload_router()

    def pool_usage(self) -> list[PoolUsage]:
        """Connections in use and idle in every pool of this process, for the metrics."""
        in_use, idle = self.main_reads.usage()
        writing, writers_idle = self.main_writes.usage()
        return [
            _engine_usage("main", self.main),
            PoolUsage("main", "reads", in_use, idle),
            PoolUsage("main", "writes", writing, writers_idle),
            *(_engine_usage(f"shard-{number}", engine) for number, engine in enumerate(self.shards)),
        ]

    async def reload_router(self) -> None:
        """Reads the shard map again (every `routing_refresh_seconds` and on each announced move);
        the connection pools stay as they are."""
        async with self.main_session() as session:
            await self.router.reload(session)

    async def dispose(self) -> None:
        await self.main_reads.close()
        await self.main_writes.close()
        await self.main.dispose()
        for engine in self.shards:
            await engine.dispose()
