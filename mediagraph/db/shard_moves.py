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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, delete, func, insert, select, text, tuple_
from sqlalchemy.dialects.postgresql import insert as upsert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import Executable

from mediagraph.db.comments import NEXT_REVISION, Comment, CommentCount, CommentTombstone, NicknameOffset
from mediagraph.db.residency import fence, hosts, lock_routing
from mediagraph.db.routing import announce_routing_change
from mediagraph.db.shards import HostedLogicalShard, ShardMapping
from mediagraph.services import Services

MOVE_LOCK_NAMESPACE = 0x5A4F
MAX_CATCH_UP_ROUNDS = 5

COMMENTS: Table = Comment.__table__  # type: ignore[attr-defined]
COUNTS: Table = CommentCount.__table__  # type: ignore[attr-defined]
TOMBSTONES: Table = CommentTombstone.__table__  # type: ignore[attr-defined]
OFFSETS: Table = NicknameOffset.__table__  # type: ignore[attr-defined]
HOSTED: Table = HostedLogicalShard.__table__  # type: ignore[attr-defined]
SHARD_MAP: Table = ShardMapping.__table__  # type: ignore[attr-defined]

Progress = Callable[[str, int, int], None]
Write = Callable[[Executable], Awaitable[Any]]


class MoveRefused(Exception):
    """The move cannot start (bad arguments, a concurrent move, nothing to do)."""


@dataclass
class MoveReport:
    logical: int
    source: int
    target: int
    copied: int
    rounds: int


def _no_progress(phase: str, done: int, total: int) -> None:
    """Progress is optional; the CLI passes a Rich progress bar."""


async def move_logical_shard(
    services: Services,
    *,
    logical: int,
    target: int,
    batch_size: int = 1_000,
    grace_seconds: float | None = None,
    progress: Progress = _no_progress,
) -> MoveReport:
    databases = services.databases
    if not 0 <= logical < databases.router.logical_shards:
        raise MoveRefused(f"logical shard must be between 0 and {databases.router.logical_shards - 1}")
    if not 0 <= target < len(databases.shards):
        raise MoveRefused(f"physical shard must be between 0 and {len(databases.shards) - 1}")
    grace = services.settings.shard_move_grace_seconds if grace_seconds is None else grace_seconds
    async with databases.main.connect() as guard:
        locked = await guard.scalar(
            text("SELECT pg_try_advisory_lock(:ns, :l)"), {"ns": MOVE_LOCK_NAMESPACE, "l": logical}
        )
        await guard.commit()
        if not locked:
            raise MoveRefused(f"another move of logical shard {logical} is running")
        await databases.reload_router()
        source = databases.router.physical_of_logical(logical)
        if source == target:
            raise MoveRefused(f"logical shard {logical} is already on physical shard {target}")
        source_engine, target_engine = databases.shards[source], databases.shards[target]

        await _clear_leftovers(services, source_engine, target_engine, logical, batch_size)
        async with source_engine.connect() as reader:
            counted = select(func.count()).select_from(COMMENTS).where(COMMENTS.c.logical_shard == logical)
            total = int(await reader.scalar(counted) or 0)

        async def write(statement: Executable) -> None:
            async with target_engine.begin() as connection:
                await connection.execute(statement)

        copied, since, rounds = 0, 0, 0
        while rounds < MAX_CATCH_UP_ROUNDS:
            upto = await _high_water(source_engine, logical)
            rounds += 1
            async with source_engine.connect() as reader:
                done = await _copy_range(reader, write, logical, since, upto, batch_size, progress, copied, total)
            copied, since = copied + done, upto
            if done < batch_size:
                break
        copied += await _switch(services, logical, source, target, since, batch_size)
        progress("switched", copied, total)
        await asyncio.sleep(grace)
        await _delete_logical(source_engine, logical, batch_size, progress)
    return MoveReport(logical=logical, source=source, target=target, copied=copied, rounds=rounds + 1)


async def _high_water(engine: AsyncEngine, logical: int) -> int:
    async with engine.begin() as connection:
        await fence(connection, logical)
        if not await hosts(connection, logical):
            raise MoveRefused(f"the source no longer hosts logical shard {logical}")
        mark = await connection.scalar(
            text("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM comment_revision_seq")
        )
        return int(mark or 0)


async def _copy_range(
    source: AsyncConnection,
    write: Write,
    logical: int,
    after: int,
    upto: int | None,
    batch_size: int,
    progress: Progress,
    done_before: int = 0,
    total: int = 0,
) -> int:
    """Upsert rows of `logical` with revisions in (after, upto] onto the target; apply tombstones."""
    copied = 0
    for table, key in ((COMMENTS, ("media_id", "id")), (COUNTS, ("media_id",))):
        columns = [column for column in table.c if column.name != "revision"]
        async for rows in _batches(source, table, logical, after, upto, batch_size):
            values = [{column.name: row[column.name] for column in columns} for row in rows]
            statement = upsert(table).values(values)
            updates = {column.name: statement.excluded[column.name] for column in columns if column.name not in key}
            await write(
                statement.on_conflict_do_update(index_elements=list(key), set_={**updates, "revision": NEXT_REVISION})
            )
            if table is COMMENTS:
                copied += len(rows)
                progress("copy", done_before + copied, max(total, done_before + copied))
    async for rows in _batches(source, TOMBSTONES, logical, after, upto, batch_size):
        refs = [(row["media_id"], row["comment_id"]) for row in rows]
        await write(delete(COMMENTS).where(tuple_(COMMENTS.c.media_id, COMMENTS.c.id).in_(refs)))
    return copied


async def _batches(source: AsyncConnection, table: Table, logical: int, after: int, upto: int | None, size: int):  # type: ignore[no-untyped-def]
    cursor = after
    while True:
        query = select(table).where(table.c.logical_shard == logical, table.c.revision > cursor)
        if upto is not None:
            query = query.where(table.c.revision <= upto)
        rows = list((await source.execute(query.order_by(table.c.revision).limit(size))).mappings())
        if not rows:
            return
        yield rows
        cursor = rows[-1]["revision"]


async def _switch(services: Services, logical: int, source: int, target: int, since: int, batch_size: int) -> int:
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
            copied = await _copy_range(old, new.execute, logical, since, None, batch_size, _no_progress)
            unified = _minimum(await _offsets(old), await _offsets(new))
            await _lower_offsets(new, unified)
            await new.execute(insert(HOSTED).values(logical_shard=logical))
        await _lower_offsets(old, unified)
        await old.execute(delete(HOSTED).where(HOSTED.c.logical_shard == logical))
    return copied


async def _offsets(connection: AsyncConnection) -> dict[int, int]:
    rows = await connection.execute(select(OFFSETS.c.queue_id, OFFSETS.c.applied_offset))
    return dict(rows.all())


def _minimum(first: dict[int, int], second: dict[int, int]) -> dict[int, int]:
    # A queue a shard has no row for was never applied there: offset 0.
    return {queue: min(first.get(queue, 0), second.get(queue, 0)) for queue in first.keys() | second.keys()}


async def _lower_offsets(connection: AsyncConnection, offsets: dict[int, int]) -> None:
    for queue, offset in offsets.items():
        statement = upsert(OFFSETS).values(queue_id=queue, applied_offset=offset)
        await connection.execute(
            statement.on_conflict_do_update(
                index_elements=["queue_id"],
                set_={"applied_offset": text("LEAST(nickname_offsets.applied_offset, excluded.applied_offset)")},
            )
        )


async def _clear_leftovers(
    services: Services, source: AsyncEngine, target: AsyncEngine, logical: int, batch_size: int
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
    await _delete_logical(target, logical, batch_size, _no_progress)


async def _delete_logical(engine: AsyncEngine, logical: int, batch_size: int, progress: Progress) -> None:
    removed = 0
    for table, key in (
        (COMMENTS, ("media_id", "id")),
        (COUNTS, ("media_id",)),
        (TOMBSTONES, ("logical_shard", "revision")),
    ):
        columns = [table.c[name] for name in key]
        while True:
            chosen = select(*columns).where(table.c.logical_shard == logical).limit(batch_size)
            async with engine.begin() as connection:
                result = await connection.execute(delete(table).where(tuple_(*columns).in_(chosen)))
            count = int(result.rowcount)
            if table is COMMENTS:
                removed += count
                progress("cleanup", removed, removed)
            if count < batch_size:
                break
