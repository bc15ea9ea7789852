"""Shard transactions that respect moves, and the shard errors users see as SERVICE_UNAVAILABLE.

Processes cache the logical→physical map. A writer opens a transaction on the shard
its cache names, takes the logical shard's advisory lock in shared mode, then checks
that the shard still lists it in `hosted_logical_shards`. A move takes the same lock
exclusively while it copies the last changes, and deletes the row before releasing it.
So a write either lands before the fence or finds the row gone, reloads the map and
retries on the new home: no write lands on a copy that is about to be discarded.
The lock manager queues requests in order, so a stream of writers cannot starve a move.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from sqlalchemy import select, text
from sqlalchemy.exc import DBAPIError, InterfaceError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlmodel import col

from mediagraph.db.engines import Databases
from mediagraph.db.shards import HostedLogicalShard, ShardMapping
from mediagraph.errors import ServiceUnavailable
from mediagraph.pubsub.bus import EventBus
from mediagraph.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")


class ShardServices(Protocol):
    """What shard work needs of the process's resources (`Services` provides it)."""

    @property
    def settings(self) -> Settings: ...

    @property
    def databases(self) -> Databases: ...

    @property
    def bus(self) -> EventBus: ...

# Advisory lock on the main database around every change of which shard hosts what.
ROUTING_LOCK = (0x5A4D, 0)
# Advisory lock namespace on shard databases: one lock per logical shard, and one more
# (EVERY_LOGICAL_SHARD) that work spanning every logical shard of a database takes.
FENCE_NAMESPACE = 0x5A4E
EVERY_LOGICAL_SHARD = -1
# Connection failures, operator shutdowns, a missing database, exhausted resources.
UNAVAILABLE_SQLSTATES = ("08", "57P", "3D", "53")
RETRYABLE_SQLSTATES = ("40P01", "40001")  # deadlock, serialization failure
ROUTING_ATTEMPTS = 40
ROUTING_BACKOFF_SECONDS = 0.05
UNAVAILABLE_MESSAGE = "Comments are temporarily unavailable for this media; try again shortly."


class StaleRouting(Exception):
    """The logical shard no longer lives where this process's cached map says."""


def _sqlstate(error: DBAPIError) -> str:
    state = getattr(error.orig, "sqlstate", None)
    return state if isinstance(state, str) else ""


def is_unavailable(error: BaseException) -> bool:
    if isinstance(error, OSError | TimeoutError | PoolTimeout | InterfaceError):
        return True
    if isinstance(error, DBAPIError):
        return error.connection_invalidated or _sqlstate(error).startswith(UNAVAILABLE_SQLSTATES)
    return False


def is_retryable(error: BaseException) -> bool:
    return isinstance(error, DBAPIError) and _sqlstate(error) in RETRYABLE_SQLSTATES


def unavailable(error: BaseException) -> ServiceUnavailable:
    log.warning("shard unavailable: %s", error)
    return ServiceUnavailable(UNAVAILABLE_MESSAGE)


async def on_logical_shard(services: ShardServices, media_id: int, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
    """Run `work` in one transaction on the shard hosting `media_id`, fenced against moves.

    Retried whole on stale routing and on deadlocks, so `work` must only touch this shard.
    """
    databases = services.databases
    logical = databases.router.logical_shard(media_id)
    for attempt in range(ROUTING_ATTEMPTS):
        physical = databases.router.physical_of_logical(logical)
        try:
            async with databases.shard_session(physical) as session, session.begin():
                await session.execute(
                    text("SELECT pg_advisory_xact_lock_shared(:ns, :logical)"),
                    {"ns": FENCE_NAMESPACE, "logical": logical},
                )
                # A separate statement: its snapshot is taken after the lock was granted.
                if not await hosts(session, logical):
                    raise StaleRouting(logical)
                return await work(session)
        except StaleRouting:
            await databases.reload_router()
            if attempt:
                await asyncio.sleep(ROUTING_BACKOFF_SECONDS)
        except Exception as error:
            if is_retryable(error) and attempt < 3:
                continue
            if is_unavailable(error):
                raise unavailable(error) from error
            raise
    # Only while a move is between releasing the old home and publishing the new map.
    raise ServiceUnavailable(UNAVAILABLE_MESSAGE)


async def on_physical_shard(
    services: ShardServices, physical: int, work: Callable[[AsyncSession, frozenset[int]], Awaitable[T]]
) -> T:
    """One transaction on a physical shard, with every logical shard it hosts fenced for share.

    For work spanning logical shards (nickname replay, repair): `work` receives the hosted
    set and must leave rows of other logical shards alone (they are leftovers of a move).
    """
    try:
        async with services.databases.shard_session(physical) as session, session.begin():
            await session.execute(
                text("SELECT pg_advisory_xact_lock_shared(:ns, :every)"),
                {"ns": FENCE_NAMESPACE, "every": EVERY_LOGICAL_SHARD},
            )
            # Read after the lock: no move can release a logical shard of this set until we
            # commit. One that arrives meanwhile is not in it and is left alone.
            return await work(session, await hosted_set(session))
    except Exception as error:
        if is_unavailable(error):
            raise unavailable(error) from error
        raise


async def hosts(session: AsyncSession | AsyncConnection, logical: int) -> bool:
    found = await session.scalar(
        select(col(HostedLogicalShard.logical_shard)).where(col(HostedLogicalShard.logical_shard) == logical)
    )
    return found is not None


async def hosted_set(session: AsyncSession | AsyncConnection) -> frozenset[int]:
    return frozenset((await session.execute(select(col(HostedLogicalShard.logical_shard)))).scalars())


async def fence(connection: AsyncConnection, logical: int) -> None:
    """Exclusive: waits for in-flight writers of `logical` and holds new ones until the transaction ends.

    Writers of one logical shard hold its lock shared; work over every logical shard holds
    the EVERY_LOGICAL_SHARD lock shared (one lock, however many logical shards there are).
    """
    for key in (logical, EVERY_LOGICAL_SHARD):
        await connection.execute(text("SELECT pg_advisory_xact_lock(:ns, :key)"), {"ns": FENCE_NAMESPACE, "key": key})


async def read_shard(services: ShardServices, physical: int, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
    try:
        async with services.databases.shard_session(physical) as session:
            return await work(session)
    except Exception as error:
        if is_unavailable(error):
            raise unavailable(error) from error
        raise


async def lock_routing(connection: AsyncConnection) -> None:
    """Held until the transaction ends: serialises residency seeding with a move's switch."""
    await connection.execute(text("SELECT pg_advisory_xact_lock(:a, :b)"), {"a": ROUTING_LOCK[0], "b": ROUTING_LOCK[1]})


async def seed_residency(main: AsyncConnection, shards: list[AsyncConnection]) -> None:
    """Host every logical shard on its mapped physical shard, unless some shard already hosts it.

    Never removes a row: only a move does, and a logical shard hosted nowhere (a move that
    died between releasing the old home and switching the map) returns to its mapped home.
    """
    await lock_routing(main)
    mapping = (await main.execute(select(col(ShardMapping.logical_shard), col(ShardMapping.physical_shard)))).all()
    hosted: set[int] = set()
    for shard in shards:
        hosted.update(await hosted_set(shard))
    for physical, shard in enumerate(shards):
        missing = [logical for logical, home in mapping if home == physical and logical not in hosted]
        if missing:
            await shard.execute(
                text("INSERT INTO hosted_logical_shards (logical_shard) SELECT unnest(CAST(:ls AS integer[]))"),
                {"ls": missing},
            )
