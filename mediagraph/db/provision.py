"""Create the databases if missing, migrate them all, and seed the shard map."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from mediagraph.db.endpoints import Endpoints
from mediagraph.db.shards.residency import seed_residency

MIGRATIONS = Path(__file__).parent / "migrations"


async def ensure_database(url: str) -> None:
    target = make_url(url)
    admin = create_async_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as connection:
            exists = await connection.scalar(
                text("SELECT 1 FROM pg_database WHERE datname = :name"),
                {"name": target.database},
            )
            if not exists:
                quoted = target.database.replace('"', '""') if target.database else ""
                await connection.execute(text(f'CREATE DATABASE "{quoted}"'))
    finally:
        await admin.dispose()


async def drop_database(url: str) -> None:
    target = make_url(url)
    admin = create_async_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as connection:
            quoted = (target.database or "").replace('"', '""')
            await connection.execute(text(f'DROP DATABASE IF EXISTS "{quoted}" WITH (FORCE)'))
    finally:
        await admin.dispose()


def alembic_config(kind: str, url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS / kind))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(kind: str, url: str) -> None:
    command.upgrade(alembic_config(kind, url), "heads")


async def seed_shard_map(database_url: str, logical_shards: int, physical_shards: int) -> None:
    engine = create_async_engine(database_url)
    try:
        async with engine.begin() as connection:
            # Only fills gaps: a logical shard that was moved keeps its placement.
            await connection.execute(
                text(
                    "INSERT INTO shard_map (logical_shard, physical_shard) "
                    "SELECT n, n % :physical FROM generate_series(0, :last) AS n "
                    "ON CONFLICT (logical_shard) DO NOTHING"
                ),
                {"physical": physical_shards, "last": logical_shards - 1},
            )
    finally:
        await engine.dispose()


async def seed_hosted_logical_shards(endpoints: Endpoints) -> None:
    main = create_async_engine(endpoints.database_url, poolclass=NullPool)
    shards = [create_async_engine(url, poolclass=NullPool) for url in endpoints.shard_urls]
    try:
        async with main.begin() as connection, contextlib.AsyncExitStack() as stack:
            shard_connections = [await stack.enter_async_context(engine.begin()) for engine in shards]
            await seed_residency(connection, shard_connections)
    finally:
        for engine in (main, *shards):
            await engine.dispose()


async def provision(endpoints: Endpoints, *, logical_shards: int) -> None:
    urls = (endpoints.database_url, *endpoints.shard_urls)
    await asyncio.gather(*(ensure_database(url) for url in urls))
    # Alembic's env runs its own event loop, so upgrades go to a thread; one at a
    # time, because Alembic keeps the migration context in a module-level proxy.
    for kind, url in (("main", endpoints.database_url), *(("shard", url) for url in endpoints.shard_urls)):
        await asyncio.to_thread(upgrade, kind, url)
    await seed_shard_map(endpoints.database_url, logical_shards, len(endpoints.shard_urls))
    await seed_hosted_logical_shards(endpoints)
