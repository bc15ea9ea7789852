"""Connection pools for the main database and every physical shard."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from mediagraph.db.endpoints import Endpoints
from mediagraph.db.reads import ReadPool
from mediagraph.db.shards.router import ShardRouter
from mediagraph.settings import Settings


async def ping(engine: AsyncEngine) -> None:
    """Raises unless the database answers a trivial query."""
    async with engine.connect() as connection:
        await connection.execute(text("SELECT 1"))


def make_engine(url: str, settings: Settings) -> AsyncEngine:
    return create_async_engine(
        url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        pool_pre_ping=True,
        # Fail a request quickly instead of hanging on a shard that is down.
        connect_args={"timeout": 5, "command_timeout": 30},
    )


class Databases:
    def __init__(self, endpoints: Endpoints, settings: Settings) -> None:
        self.main = make_engine(endpoints.database_url, settings)
        self.shards = [make_engine(url, settings) for url in endpoints.shard_urls]
        self.main_sessions = async_sessionmaker(self.main, expire_on_commit=False)
        self.shard_sessions = [async_sessionmaker(engine, expire_on_commit=False) for engine in self.shards]
        self.router = ShardRouter(settings.logical_shards, len(self.shards))
        # Hot single-statement reads (loaders, listings) skip the ORM session: see db/reads.py.
        self.main_reads = ReadPool(endpoints.database_url, settings)

    def main_session(self) -> AsyncSession:
        return self.main_sessions()

    def shard_session(self, physical_shard: int) -> AsyncSession:
        return self.shard_sessions[physical_shard]()

    async def start(self) -> None:
        await self.reload_router()

    async def reload_router(self) -> None:
        async with self.main_session() as session:
            await self.router.reload(session)
        await self.main_reads.start()

    async def dispose(self) -> None:
        await self.main_reads.close()
        await self.main.dispose()
        for engine in self.shards:
            await engine.dispose()
