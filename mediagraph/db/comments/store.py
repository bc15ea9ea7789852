"""SQL on one shard session for comments: writes (under the media's counter lock) and reads.

Callers route and fence (see `db.residency`); nothing here knows which shard it runs on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import RowMapping, case, delete, insert, select, text, tuple_, update
from sqlalchemy.dialects.postgresql import insert as upsert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from mediagraph.db.comments import NEXT_REVISION, Comment, CommentCount
from mediagraph.db.comments.paths import descendants_upper_bound
from mediagraph.db.shards.residency import ShardServices, on_logical_shard, read_shard

COMMENT_COLUMNS = tuple(column.name for column in Comment.__table__.columns if column.name != "revision")  # type: ignore[attr-defined]


def comment_of(row: RowMapping) -> Comment:
    return Comment(**{name: row[name] for name in COMMENT_COLUMNS})


@dataclass(frozen=True)
class ThreadWindow:
    """The live-comment count of a media and up to `rows` comments after a path, in thread order."""

    count: int
    comments: list[Comment]


# (media id, rows wanted, path to start after: "" for the beginning)
WindowKey = tuple[int, int, str]


async def lock_counter(session: AsyncSession, *, media_id: int, logical_shard: int, delta: int) -> None:
    """Adjust the media's counter, holding its row lock until commit.

    Every structural write to a media's thread (insert, delete) starts here, so they run
    one at a time per media: sibling paths are allocated without races, and a reply
    cannot slip under a parent that a concurrent delete is removing.
    """
    statement = (
        upsert(CommentCount)
        .values(media_id=media_id, logical_shard=logical_shard, comment_count=delta)
        .on_conflict_do_update(
            index_elements=[col(CommentCount.media_id)],
            set_={"comment_count": col(CommentCount.comment_count) + delta, "revision": NEXT_REVISION},
        )
    )
    await session.execute(statement)


async def get_comment(session: AsyncSession, *, media_id: int, comment_id: int) -> Comment | None:
    query = select(Comment).where(col(Comment.media_id) == media_id, col(Comment.id) == comment_id)
    comment = await session.scalar(query)
    if comment is not None:
        # Detached: writes here are explicit statements, never flushes of changed objects.
        session.expunge(comment)
    return comment


async def descendants_top_path(session: AsyncSession, *, media_id: int, parent_path: str) -> str | None:
    """The greatest path below `parent_path` (a backward scan of one index range)."""
    return await session.scalar(
        select(col(Comment.path))
        .where(
            col(Comment.media_id) == media_id,
            col(Comment.path) > parent_path,
            col(Comment.path) < descendants_upper_bound(parent_path),
        )
        .order_by(col(Comment.path).desc())
        .limit(1)
    )


async def has_descendants(session: AsyncSession, comment: Comment) -> bool:
    return await descendants_top_path(session, media_id=comment.media_id, parent_path=comment.path) is not None


async def insert_comment(session: AsyncSession, comment: Comment) -> None:
    await session.execute(insert(Comment).values({name: getattr(comment, name) for name in COMMENT_COLUMNS}))


async def confirm_nickname(
    session: AsyncSession, *, media_id: int, comment_id: int, inserted: str, current: str
) -> str | None:
    """Step 4 of creation: fix the nickname if it still holds what was inserted, and confirm.

    Comparing with the inserted value (rather than writing `current` unconditionally)
    keeps a newer nickname a replay may have written meanwhile.
    """
    return await session.scalar(
        update(Comment)
        .where(col(Comment.media_id) == media_id, col(Comment.id) == comment_id)
        .values(
            writer_nickname=case(
                (col(Comment.writer_nickname) == inserted, current), else_=col(Comment.writer_nickname)
            ),
            confirmed=True,
            revision=NEXT_REVISION,
        )
        .returning(col(Comment.writer_nickname))
    )


async def remove_comment(session: AsyncSession, comment: Comment) -> bool:
    """Delete `comment`, or mark it deleted while replies remain; then remove emptied deleted ancestors.

    Returns whether the comment itself was removed (False: marked deleted).
    """
    if await has_descendants(session, comment):
        await session.execute(
            update(Comment)
            .where(col(Comment.media_id) == comment.media_id, col(Comment.id) == comment.id)
            .values(deleted=True, revision=NEXT_REVISION)
        )
        return False
    await _delete_with_tombstone(session, comment)
    parent_id = comment.parent_id
    while parent_id is not None:
        parent = await get_comment(session, media_id=comment.media_id, comment_id=parent_id)
        if parent is None or not parent.deleted or await has_descendants(session, parent):
            break
        await _delete_with_tombstone(session, parent)
        parent_id = parent.parent_id
    return True


async def _delete_with_tombstone(session: AsyncSession, comment: Comment) -> None:
    # The tombstone lets a shard move that is copying this logical shard delete its copy too.
    await session.execute(
        text(
            "WITH gone AS (DELETE FROM comments WHERE media_id = :media_id AND id = :id "
            "RETURNING logical_shard, media_id, id) "
            "INSERT INTO comment_tombstones (logical_shard, media_id, comment_id, created_at) "
            "SELECT logical_shard, media_id, id, now() FROM gone"
        ),
        {"media_id": comment.media_id, "id": comment.id},
    )


async def purge_media(session: AsyncSession, *, media_id: int) -> int:
    removed = await session.execute(
        text(
            "WITH gone AS (DELETE FROM comments WHERE media_id = :media_id RETURNING logical_shard, media_id, id) "
            "INSERT INTO comment_tombstones (logical_shard, media_id, comment_id, created_at) "
            "SELECT logical_shard, media_id, id, now() FROM gone"
        ),
        {"media_id": media_id},
    )
    await session.execute(delete(CommentCount).where(col(CommentCount.media_id) == media_id))
    return int(removed.rowcount)  # type: ignore[attr-defined]


async def purge_media_comments(services: ShardServices, *, media_id: int) -> None:
    """A deleted media's comments go with it, on whichever shard hosts them now."""

    async def work(session: AsyncSession) -> int:
        return await purge_media(session, media_id=media_id)

    await on_logical_shard(services, media_id, work)


THREAD_WINDOWS = text(
    """
    SELECT k.ord AS key_index, cc.comment_count AS live_count, c.*
    FROM unnest(CAST(:media_ids AS bigint[]), CAST(:limits AS integer[]), CAST(:afters AS text[]))
         WITH ORDINALITY AS k(media_id, max_rows, after_path, ord)
    LEFT JOIN comment_counts cc ON cc.media_id = k.media_id
    LEFT JOIN LATERAL (
        SELECT * FROM comments
        WHERE comments.media_id = k.media_id AND comments.path > (k.after_path COLLATE "C")
        ORDER BY comments.path
        LIMIT k.max_rows
    ) c ON true
    ORDER BY k.ord, c.path
    """
)


async def thread_windows(session: AsyncSession, keys: Sequence[WindowKey]) -> list[ThreadWindow]:
    """Counts and first comments of many media in one statement: one index probe per key."""
    rows = await session.execute(
        THREAD_WINDOWS,
        {
            "media_ids": [key[0] for key in keys],
            "limits": [key[1] for key in keys],
            "afters": [key[2] for key in keys],
        },
    )
    counts = [0] * len(keys)
    comments: list[list[Comment]] = [[] for _ in keys]
    for row in rows.mappings():
        index = row["key_index"] - 1
        counts[index] = row["live_count"] or 0
        if row["id"] is not None:
            comments[index].append(comment_of(row))
    return [ThreadWindow(count, found) for count, found in zip(counts, comments, strict=True)]


async def comments_by_refs(session: AsyncSession, refs: Sequence[tuple[int, int]]) -> list[Comment | None]:
    rows = await session.scalars(select(Comment).where(tuple_(col(Comment.media_id), col(Comment.id)).in_(refs)))
    found = {(row.media_id, row.id): row for row in rows}
    return [found.get(ref) for ref in refs]


async def page_by_number(session: AsyncSession, *, media_id: int, offset: int, size: int) -> list[Comment]:
    """The seed's page query: skip along the covering index, then fetch only the page's rows.

    LIMIT and OFFSET are written into the statement: as parameters of a prepared statement
    the planner would plan for an unknown (large) limit and may sort the whole thread.
    """
    rows = await session.execute(
        text(
            "SELECT c.* FROM (SELECT id FROM comments WHERE media_id = :media_id "
            f"ORDER BY path LIMIT {int(size)} OFFSET {int(offset)}) page "
            "JOIN comments c ON c.media_id = :media_id AND c.id = page.id ORDER BY c.path"
        ),
        {"media_id": media_id},
    )
    return [comment_of(row) for row in rows.mappings()]


async def limited_count(session: AsyncSession, *, media_id: int, limit: int) -> int:
    """Rows of the thread, counted no further than `limit`."""
    counted = await session.scalar(
        text(f"SELECT count(*) FROM (SELECT 1 FROM comments WHERE media_id = :media_id LIMIT {int(limit)}) t"),
        {"media_id": media_id},
    )
    return int(counted or 0)


async def thread_before(session: AsyncSession, *, media_id: int, before_path: str | None, limit: int) -> list[Comment]:
    """Thread order backward: up to `limit` comments just before `before_path` (the thread's last ones
    when None), nearest first."""
    query = select(Comment).where(col(Comment.media_id) == media_id)
    if before_path is not None:
        query = query.where(col(Comment.path) < before_path)
    return list(await session.scalars(query.order_by(col(Comment.path).desc()).limit(limit)))


async def comments_by_writer(session: AsyncSession, *, writer_id: int, before_id: int, limit: int) -> list[Comment]:
    rows = await session.scalars(
        select(Comment)
        .where(col(Comment.writer_id) == writer_id, col(Comment.id) < before_id, ~col(Comment.deleted))
        .order_by(col(Comment.id).desc())
        .limit(limit)
    )
    return list(rows)


async def comments_by_writer_after(session: AsyncSession, *, writer_id: int, after_id: int, limit: int) -> list[Comment]:
    """A writer's comments newer than `after_id`, oldest first: backward pages of the newest-first listing."""
    rows = await session.scalars(
        select(Comment)
        .where(col(Comment.writer_id) == writer_id, col(Comment.id) > after_id, ~col(Comment.deleted))
        .order_by(col(Comment.id))
        .limit(limit)
    )
    return list(rows)


async def counts_of_media_between(session: AsyncSession, *, first_id: int, end_id: int) -> list[tuple[int, int, int]]:
    """(media id, logical shard, live comments) for media with ids in [first_id, end_id)."""
    rows = await session.execute(
        select(col(CommentCount.media_id), col(CommentCount.logical_shard), col(CommentCount.comment_count)).where(
            col(CommentCount.media_id) >= first_id,
            col(CommentCount.media_id) < end_id,
            col(CommentCount.comment_count) > 0,
        )
    )
    return [(media_id, logical, count) for media_id, logical, count in rows.all()]


async def comment_counts_between(services: ShardServices, first_id: int, end_id: int) -> dict[int, int]:
    """Live comments of media with ids in [first_id, end_id), from every shard at once."""
    router = services.databases.router

    async def from_shard(physical: int) -> list[tuple[int, int, int]]:
        async def work(session: AsyncSession) -> list[tuple[int, int, int]]:
            return await counts_of_media_between(session, first_id=first_id, end_id=end_id)

        return await read_shard(services, physical, work)

    per_shard = await asyncio.gather(*(from_shard(n) for n in range(len(services.databases.shards))))
    return {
        media_id: count
        for physical, rows in enumerate(per_shard)
        for media_id, logical, count in rows
        # A logical shard that moved away leaves a copy behind until its grace ends.
        if router.physical_of_logical(logical) == physical
    }
