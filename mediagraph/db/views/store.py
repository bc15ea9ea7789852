"""Statements over view counts and likes: what the flush, the sync and the count reads run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from uuid import UUID

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from mediagraph.db.engines import Databases
from mediagraph.db.reads import ReadPool
from mediagraph.db.views import MediaLikeCount, MediaViewCount

# pg advisory lock: one sync at a time; others skip the round.
SYNC_LOCK = 0x76696577

# Whether a user likes each of some media (asyncpg: user id, media ids).
LIKED_BY_USER = "SELECT media_id FROM media_likes WHERE user_id = $1 AND media_id = ANY($2)"

APPLY_VIEW_DELTAS = text("""
WITH deltas AS (
    SELECT d.media_id, d.delta FROM unnest(CAST(:ids AS bigint[]), CAST(:deltas AS bigint[])) AS d(media_id, delta)
), live AS (
    -- Views of media deleted since are dropped; KEY SHARE holds off a delete until commit.
    SELECT m.id FROM media m JOIN deltas d ON d.media_id = m.id ORDER BY m.id FOR KEY SHARE OF m
), counted AS (
    INSERT INTO media_view_count AS c (media_id, view_count)
    SELECT d.media_id, d.delta FROM deltas d JOIN live ON live.id = d.media_id ORDER BY d.media_id
    ON CONFLICT (media_id) DO UPDATE SET view_count = c.view_count + excluded.view_count
    RETURNING c.media_id
)
INSERT INTO media_count_changes (media_id) SELECT media_id FROM counted
""")

# One statement, one snapshot: the change rows it consumes and the counts it copies are
# read together, so every consumed change is reflected; later ones stay for the next sync.
SYNC_CHANGES = text("""
WITH taken AS (
    DELETE FROM media_count_changes
    WHERE id IN (SELECT id FROM media_count_changes ORDER BY id LIMIT :chunk)
    RETURNING media_id
), fresh AS (
    SELECT t.media_id, coalesce(v.view_count, 0) AS view_count, coalesce(l.like_count, 0) AS like_count
    FROM (SELECT DISTINCT media_id FROM taken) AS t
    LEFT JOIN media_view_count v ON v.media_id = t.media_id
    LEFT JOIN media_like_count l ON l.media_id = t.media_id
), stamped AS (
    UPDATE media m SET view_count = f.view_count, like_count = f.like_count, sort_generation = :generation
    FROM fresh f WHERE m.id = f.media_id
    RETURNING m.id
)
SELECT (SELECT count(*) FROM taken), (SELECT count(*) FROM stamped)
""")

COUNT_CHANGES_WAITING = text("SELECT count(*) FROM (SELECT 1 FROM media_count_changes LIMIT :limit) AS waiting")

# asyncpg (the read path): media ids, batch ids.
DURABLE_COUNTS = (
    "SELECT i.media_id, coalesce(c.view_count, 0) AS view_count, "
    "(SELECT array_agg(b.id) FROM media_view_batches b WHERE b.id = ANY($2::uuid[])) AS applied "
    "FROM unnest($1::bigint[]) AS i(media_id) "
    "LEFT JOIN media_view_count c ON c.media_id = i.media_id"
)

# Exact likes of each of some media (asyncpg: media ids); a media without a row has none.
LIKE_COUNTS = "SELECT media_id, like_count FROM media_like_count WHERE media_id = ANY($1)"


async def apply_view_deltas(session: AsyncSession, deltas: Mapping[int, int]) -> None:
    """Add flushed views to the durable counts (media deleted since are skipped) and note the change."""
    media_ids = sorted(deltas)
    await session.execute(APPLY_VIEW_DELTAS, {"ids": media_ids, "deltas": [deltas[m] for m in media_ids]})


async def sync_count_changes(session: AsyncSession, *, chunk: int) -> int:
    """Copy up to `chunk` changed counts into the sort columns under a new generation; the changes consumed.

    Returns 0 without waiting while another sync holds the lock. Runs in the caller's transaction.
    """
    if not await session.scalar(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": SYNC_LOCK}):
        return 0
    generation = await session.scalar(text("SELECT generation FROM media_sort_generation WHERE id = 1 FOR UPDATE"))
    following = int(generation or 0) + 1
    taken, stamped = (await session.execute(SYNC_CHANGES, {"chunk": chunk, "generation": following})).one()
    if stamped:
        await session.execute(text("UPDATE media_sort_generation SET generation = :g WHERE id = 1"), {"g": following})
    return int(taken)


async def count_changes_waiting(session: AsyncSession, *, limit: int) -> int:
    """Count changes not yet synced into the sort columns, up to `limit` (counting more only costs)."""
    waiting = await session.scalar(COUNT_CHANGES_WAITING, {"limit": limit})
    return int(waiting or 0)


async def forget_applied_batches(session: AsyncSession, *, before: datetime) -> None:
    await session.execute(text("DELETE FROM media_view_batches WHERE applied_at < :cutoff"), {"cutoff": before})


async def durable_view_counts(
    reads: ReadPool, media_ids: Sequence[int], batches: Sequence[UUID]
) -> tuple[dict[int, int], set[UUID]]:
    """Flushed views of each media, and which of `batches` PostgreSQL has applied: one snapshot."""
    rows = await reads.fetch(DURABLE_COUNTS, list(dict.fromkeys(media_ids)), list(batches))
    applied = set(rows[0]["applied"] or ()) if rows else set()
    return {row["media_id"]: row["view_count"] for row in rows}, applied


async def like_counts(reads: ReadPool, media_ids: Sequence[int]) -> dict[int, int]:
    """Exact likes of each media (merged with other requests' reads of the same kind)."""
    rows = await reads.fetch_keyed(LIKE_COUNTS, "media_id", media_ids)
    return {media_id: rows[media_id]["like_count"] if media_id in rows else 0 for media_id in media_ids}


async def flushed_view_counts_between(databases: Databases, first_id: int, end_id: int) -> dict[int, int]:
    """Views flushed to PostgreSQL for media with ids in [first_id, end_id): what VIEW events announced."""
    return await _counts_between(databases, MediaViewCount.media_id, MediaViewCount.view_count, first_id, end_id)


async def like_counts_between(databases: Databases, first_id: int, end_id: int) -> dict[int, int]:
    """Likes of media with ids in [first_id, end_id)."""
    return await _counts_between(databases, MediaLikeCount.media_id, MediaLikeCount.like_count, first_id, end_id)


async def _counts_between(databases: Databases, media_id: int, count: int, first_id: int, end_id: int) -> dict[int, int]:
    query = select(col(media_id), col(count)).where(col(media_id) >= first_id, col(media_id) < end_id, col(count) > 0)
    async with databases.main_session() as session:
        return {row[0]: row[1] for row in (await session.execute(query)).all()}
