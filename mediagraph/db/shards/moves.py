"""Moving one logical shard's comments to another physical shard while reads and writes go on.

1. Copy rounds. A brief fence on the source (it waits out in-flight writers of the
   logical shard) reads the revision high-water mark R: every row changed up to R has
   committed, every later change gets a higher revision. Rows with revisions in
   (previous R, R] are upserted on the target, tombstones in that range delete copies.
2. Final round, fence held: copy what changed since the last R; on the target, host the
   logical shard and lower the nickname offsets to the smaller of both shards' (the
   seed: rows copied from a shard that had replayed less must get those logs again);
   release the source; switch `shard_map`; tell every process to reload its map.
3. After a grace period in which every process reloads its map, delete the old copies.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from sqlalchemy import Table, delete, func, insert, select, text
from sqlalchemy.dialects.postgresql import insert as upsert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import Executable

from mediagraph.db.shards import HostedLogicalShard, ShardMapping
from mediagraph.db.shards.copy import (
    COMMENTS,
    Progress,
    SourceGone,
    copy_range,
    delete_logical,
    high_water,
    lower_offsets,
    no_progress,
    read_offsets,
    unified_offsets,
)
from mediagraph.db.shards.residency import ShardServices, fence, hosts, lock_routing
from mediagraph.db.shards.routing import announce_routing_change

MOVE_LOCK_NAMESPACE = 0x5A4F
MAX_CATCH_UP_ROUNDS = 5

HOSTED: Table = HostedLogicalShard.__table__  # type: ignore[attr-defined]
SHARD_MAP: Table = ShardMapping.__table__  # type: ignore[attr-defined]


class MoveRefused(Exception):
    """The move cannot start (bad arguments, a concurrent move, nothing to do)."""


@dataclass
class MoveReport:
    logical: int
    source: int
    target: int
    copied: int
    rounds: int


class ShardMove:
    """One move, step by step: copy rounds while writes go on, the switch, dropping old copies.

    `move_logical_shard` runs the steps in order; tests drive them one at a time.
    """

    def __init__(
        self,
        services: ShardServices,
        *,
        logical: int,
        target: int,
        batch_size: int = 1_000,
        progress: Progress = no_progress,
    ) -> None:
        databases = services.databases
        if not 0 <= logical < databases.router.logical_shards:
            raise MoveRefused(f"logical shard must be between 0 and {databases.router.logical_shards - 1}")
        if not 0 <= target < len(databases.shards):
            raise MoveRefused(f"physical shard must be between 0 and {len(databases.shards) - 1}")
        self.services = services
        self.logical = logical
        self.target = target
        self.batch_size = batch_size
        self.progress = progress
        self.source = databases.router.physical_of_logical(logical)
        self.total = self.copied = self.since = self.rounds = 0

    @contextlib.asynccontextmanager
    async def claimed(self) -> AsyncIterator[ShardMove]:
        """Hold the move's lock (one move of a logical shard at a time) and prepare the target."""
        databases = self.services.databases
        key = {"ns": MOVE_LOCK_NAMESPACE, "l": self.logical}
        async with databases.main.connect() as guard:
            locked = await guard.scalar(text("SELECT pg_try_advisory_lock(:ns, :l)"), key)
            await guard.commit()
            if not locked:
                raise MoveRefused(f"another move of logical shard {self.logical} is running")
            try:
                await self._prepare()
                yield self
            finally:
                # A session lock outlives `connect()`: the connection goes back to the pool.
                await guard.execute(text("SELECT pg_advisory_unlock(:ns, :l)"), key)
                await guard.commit()

    async def _prepare(self) -> None:
        databases = self.services.databases
        await databases.reload_router()
        self.source = databases.router.physical_of_logical(self.logical)
        if self.source == self.target:
            raise MoveRefused(f"logical shard {self.logical} is already on physical shard {self.target}")
        source, target = databases.shards[self.source], databases.shards[self.target]
        await _clear_leftovers(self.services, source, target, self.logical, self.batch_size)
        async with source.connect() as reader:
            counted = select(func.count()).select_from(COMMENTS).where(COMMENTS.c.logical_shard == self.logical)
            self.total = int(await reader.scalar(counted) or 0)

    async def copy_round(self) -> int:
        """Copy what changed since the last round, up to a high-water mark read under a brief fence."""
        databases = self.services.databases
        source, target = databases.shards[self.source], databases.shards[self.target]
        try:
            upto = await high_water(source, self.logical)
        except SourceGone:
            raise MoveRefused(f"the source no longer hosts logical shard {self.logical}") from None

        async def write(statement: Executable) -> None:
            async with target.begin() as connection:
                await connection.execute(statement)

        async with source.connect() as reader:
            done = await copy_range(
                reader, write, self.logical, self.since, upto, self.batch_size, self.progress, self.copied, self.total
            )
        self.copied, self.since, self.rounds = self.copied + done, upto, self.rounds + 1
        return done

    async def switch(self) -> None:
        """The final round with writers fenced, then the target hosts the logical shard."""
        self.copied += await _switch(self.services, self.logical, self.source, self.target, self.since, self.batch_size)
        self.rounds += 1
        self.progress("switched", self.copied, self.total)

    async def drop_old_copies(self) -> None:
        source = self.services.databases.shards[self.source]
        await delete_logical(source, self.logical, self.batch_size, self.progress)

    def report(self) -> MoveReport:
        return MoveReport(self.logical, self.source, self.target, self.copied, self.rounds)


async def move_logical_shard(
    services: ShardServices,
    *,
    logical: int,
    target: int,
    batch_size: int = 1_000,
    grace_seconds: float | None = None,
    progress: Progress = no_progress,
) -> MoveReport:
    grace = services.settings.shard_move_grace_seconds if grace_seconds is None else grace_seconds
    move = ShardMove(services, logical=logical, target=target, batch_size=batch_size, progress=progress)
    async with move.claimed():
        # Rounds shrink as they catch up; the last one runs with writers fenced.
        while move.rounds < MAX_CATCH_UP_ROUNDS and await move.copy_round() >= batch_size:
            pass
        await move.switch()
        # Every process reloads its map on the notice; old copies stay readable until then.
        await asyncio.sleep(grace)
        await move.drop_old_copies()
    return move.report()


async def _switch(services: ShardServices, logical: int, source: int, target: int, since: int, batch_size: int) -> int:
    databases = services.databases
    async with databases.main.begin() as main:
        await lock_routing(main)
        mapped = await main.scalar(select(SHARD_MAP.c.physical_shard).where(SHARD_MAP.c.logical_shard == logical))
        if mapped not in (None, source):
            raise MoveRefused(f"logical shard {logical} was moved meanwhile")
        async with databases.shards[source].connect() as old, databases.shards[target].connect() as new:
            copied = await _hand_over(old, new, logical, since, batch_size)
        # Writers that waited on the fence now find the old home empty and reload the map.
        await main.execute(
            upsert(SHARD_MAP)
            .values(logical_shard=logical, physical_shard=target)
            .on_conflict_do_update(index_elements=["logical_shard"], set_={"physical_shard": target})
        )
    databases.router.assign(logical, target)
    await announce_routing_change(services.bus)
    return copied


async def _hand_over(old: AsyncConnection, new: AsyncConnection, logical: int, since: int, batch_size: int) -> int:
    """The final round under the fence; the target hosts the logical shard before the source lets go."""
    async with old.begin():
        await fence(old, logical)  # held until the old home lets go
        if not await hosts(old, logical):
            raise MoveRefused(f"the source no longer hosts logical shard {logical}")
        async with new.begin():
            copied = await copy_range(old, new.execute, logical, since, None, batch_size, no_progress)
            unified = unified_offsets(await read_offsets(old), await read_offsets(new))
            await lower_offsets(new, unified)
            await new.execute(insert(HOSTED).values(logical_shard=logical))
        await lower_offsets(old, unified)
        await old.execute(delete(HOSTED).where(HOSTED.c.logical_shard == logical))
    return copied


async def _clear_leftovers(
    services: ShardServices, source: AsyncEngine, target: AsyncEngine, logical: int, batch_size: int
) -> None:
    """Undo what an interrupted earlier move left: the map never named the target, so its copy goes.

    The source keeps every row until a move completes, so if an interrupted move had
    already released it, hosting it there again loses nothing.
    """
    async with services.databases.main.begin() as main:
        await lock_routing(main)
        async with target.begin() as connection:
            await connection.execute(delete(HOSTED).where(HOSTED.c.logical_shard == logical))
        async with source.begin() as connection:
            if not await hosts(connection, logical):
                await connection.execute(insert(HOSTED).values(logical_shard=logical))
    await delete_logical(target, logical, batch_size, no_progress)
