"""Copying one logical shard's rows between shard databases, by revision ranges.

The pieces a shard move is made of (see `db.shard_moves`): the high-water mark read
under a brief fence, range copies, nickname offsets, and deleting a logical shard's rows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from sqlalchemy import RowMapping, Table, delete, select, text, tuple_
from sqlalchemy.dialects.postgresql import insert as upsert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import Executable

from mediagraph.db.comments import NEXT_REVISION, Comment, CommentCount, CommentTombstone, NicknameOffset
from mediagraph.db.shards.residency import fence, hosts

COMMENTS: Table = Comment.__table__  # type: ignore[attr-defined]
COUNTS: Table = CommentCount.__table__  # type: ignore[attr-defined]
TOMBSTONES: Table = CommentTombstone.__table__  # type: ignore[attr-defined]
OFFSETS: Table = NicknameOffset.__table__  # type: ignore[attr-defined]

Progress = Callable[[str, int, int], None]
Write = Callable[[Executable], Awaitable[Any]]


class SourceGone(Exception):
    """The source no longer hosts the logical shard being copied."""


def no_progress(phase: str, done: int, total: int) -> None:
    """Progress is optional; the CLI passes a Rich progress bar."""


async def high_water(engine: AsyncEngine, logical: int) -> int:
    async with engine.begin() as connection:
        await fence(connection, logical)
        if not await hosts(connection, logical):
            raise SourceGone(logical)
        mark = await connection.scalar(
            text("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM comment_revision_seq")
        )
        return int(mark or 0)


async def copy_range(
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
    """Apply tombstones, then upsert rows of `logical`, with revisions in (after, upto] onto the target.

    Tombstones go first: a removed last reply frees its path for the next reply, and the
    copy of the removed one must be gone before the new one arrives at the same path.
    """
    async for rows in batches(source, TOMBSTONES, logical, after, upto, batch_size):
        refs = [(row["media_id"], row["comment_id"]) for row in rows]
        await write(delete(COMMENTS).where(tuple_(COMMENTS.c.media_id, COMMENTS.c.id).in_(refs)))
    copied = 0
    for table, key in ((COMMENTS, ("media_id", "id")), (COUNTS, ("media_id",))):
        columns = [column for column in table.c if column.name != "revision"]
        async for rows in batches(source, table, logical, after, upto, batch_size):
            values = [{column.name: row[column.name] for column in columns} for row in rows]
            statement = upsert(table).values(values)
            updates = {column.name: statement.excluded[column.name] for column in columns if column.name not in key}
            await write(
                statement.on_conflict_do_update(index_elements=list(key), set_={**updates, "revision": NEXT_REVISION})
            )
            if table is COMMENTS:
                copied += len(rows)
                progress("copy", done_before + copied, max(total, done_before + copied))
    return copied


async def batches(
    source: AsyncConnection, table: Table, logical: int, after: int, upto: int | None, size: int
) -> AsyncIterator[list[RowMapping]]:
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


async def read_offsets(connection: AsyncConnection) -> dict[int, int]:
    rows = await connection.execute(select(OFFSETS.c.queue_id, OFFSETS.c.applied_offset))
    return dict(rows.all())


def unified_offsets(first: dict[int, int], second: dict[int, int]) -> dict[int, int]:
    # A queue a shard has no row for was never applied there: offset 0.
    return {queue: min(first.get(queue, 0), second.get(queue, 0)) for queue in first.keys() | second.keys()}


async def lower_offsets(connection: AsyncConnection, offsets: dict[int, int]) -> None:
    for queue, offset in offsets.items():
        statement = upsert(OFFSETS).values(queue_id=queue, applied_offset=offset)
        await connection.execute(
            statement.on_conflict_do_update(
                index_elements=["queue_id"],
                set_={"applied_offset": text("LEAST(nickname_offsets.applied_offset, excluded.applied_offset)")},
            )
        )


async def delete_logical(engine: AsyncEngine, logical: int, batch_size: int, progress: Progress) -> None:
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
