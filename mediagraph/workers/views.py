"""Views worker: flush pending view counts to PostgreSQL, sync the sort columns, expire sessions.

Flushing survives a flusher killed at any point and any number of flushers at once:
1. `take` moves a bucket's pending counts atomically into an in-flight batch with its own
   id and a lease (Redis);
2. `apply_batch` adds the batch to `media_view_count` in one transaction that also records
   the batch id in `media_view_batches`, whose primary key makes a second apply a no-op;
3. `drop` deletes the in-flight batch.
A batch whose lease ran out (its flusher died between 1 and 3, or stalled) is reclaimed
and goes through 2 and 3 again: applied once whatever happened before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from sqlalchemy import text
from sqlalchemy.dialects.postgresql import insert
from sqlmodel import col

from mediagraph.dataloaders.views import view_buffer
from mediagraph.db.base import utcnow
from mediagraph.db.views import MediaViewBatch
from mediagraph.events import EngagementEvent, EngagementKind, publish_engagement
from mediagraph.keys.views import Batch
from mediagraph.services import Services
from mediagraph.subscriptions.views import announce

NAME = "views"

log = logging.getLogger(__name__)

SYNC_CHUNK = 10_000
EXPIRE_CHUNK = 100
SESSION_CLEANUP_SECONDS = 60.0
# Applied-batch ids are kept long past any lease, so a batch reclaimed late still applies once.
APPLIED_BATCH_RETENTION = timedelta(days=7)
SYNC_LOCK = 0x76696577  # pg advisory lock: one sync at a time; others skip the round

APPLY_BATCH = text("""
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

EXPIRE_SESSIONS = text("""
DELETE FROM media_page_sessions WHERE id IN (
    SELECT id FROM media_page_sessions WHERE last_used_at < :cutoff ORDER BY last_used_at LIMIT :chunk
)
""")


async def apply_batch(services: Services, batch: Batch) -> bool:
    """Add the batch to PostgreSQL unless it was already; True if this call applied it."""
    media_ids = sorted(batch.deltas)
    async with services.databases.main_session() as session, session.begin():
        first = await session.execute(
            insert(MediaViewBatch)
            .values(id=batch.id, applied_at=utcnow())
            .on_conflict_do_nothing()
            .returning(col(MediaViewBatch.id))
        )
        if first.first() is None:
            return False
        await session.execute(APPLY_BATCH, {"ids": media_ids, "deltas": [batch.deltas[m] for m in media_ids]})
    return True


async def finish_batch(services: Services, batch: Batch) -> int:
    """Apply, drop, then tell the hot-media stream and live subscribers; the views this call applied."""
    applied = await apply_batch(services, batch)
    await view_buffer(services).drop(batch)
    if not applied:
        return 0
    async with services.redis.pipeline(transaction=False) as pipe:
        for media_id, views in batch.deltas.items():
            await publish_engagement(pipe, services.keys, EngagementEvent(EngagementKind.VIEW, media_id, views))
        await pipe.execute()
    await announce(services, list(batch.deltas))
    return sum(batch.deltas.values())


async def flush_bucket(services: Services, bucket: int) -> int:
    buffer = view_buffer(services)
    lease_ms = int(services.settings.view_flush_lease_seconds * 1000)
    batches = await buffer.reclaim(bucket, lease_ms=lease_ms)
    taken = await buffer.take(bucket, lease_ms=lease_ms)
    if taken is not None:
        batches.append(taken)
    flushed = 0
    for batch in batches:
        flushed += await finish_batch(services, batch)
    return flushed


async def flush(services: Services) -> int:
    """One flush of every bucket; the number of views moved into PostgreSQL."""
    flushed = 0
    for bucket in range(services.settings.view_buckets):
        flushed += await flush_bucket(services, bucket)
    return flushed


async def sync_once(services: Services) -> int:
    """Copy changed counts into the sort columns under a new generation; the changes consumed."""
    async with services.databases.main_session() as session, session.begin():
        if not await session.scalar(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": SYNC_LOCK}):
            return 0
        generation = await session.scalar(text("SELECT generation FROM media_sort_generation WHERE id = 1 FOR UPDATE"))
        following = int(generation or 0) + 1
        result = await session.execute(SYNC_CHANGES, {"chunk": SYNC_CHUNK, "generation": following})
        taken, stamped = result.one()
        if stamped:
            await session.execute(
                text("UPDATE media_sort_generation SET generation = :g WHERE id = 1"), {"g": following}
            )
    return int(taken)


async def sync(services: Services) -> int:
    consumed = 0
    while True:
        taken = await sync_once(services)
        consumed += taken
        if taken < SYNC_CHUNK:
            return consumed


async def expire_sessions(services: Services) -> int:
    """Delete pagination sessions unused for longer than their TTL (and their items)."""
    cutoff = utcnow() - timedelta(seconds=services.settings.page_session_ttl_seconds)
    deleted = 0
    while True:
        async with services.databases.main_session() as session, session.begin():
            result = await session.execute(EXPIRE_SESSIONS, {"cutoff": cutoff, "chunk": EXPIRE_CHUNK})
        count: int = result.rowcount  # type: ignore[attr-defined]
        deleted += count
        if count < EXPIRE_CHUNK:
            break
    async with services.databases.main_session() as session, session.begin():
        await session.execute(
            text("DELETE FROM media_view_batches WHERE applied_at < :cutoff"),
            {"cutoff": utcnow() - APPLIED_BATCH_RETENTION},
        )
    return deleted


async def _every(name: str, seconds: float, step: Callable[[], Awaitable[object]], stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await step()
        except Exception:
            # One failed round (Redis or PostgreSQL away) must not stop the other loops.
            log.exception("views worker: %s failed; retrying", name)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), seconds)


async def run(services: Services, stop: asyncio.Event) -> None:
    settings = services.settings
    await asyncio.gather(
        _every("flush", settings.view_flush_interval_seconds, lambda: flush(services), stop),
        _every("sync", settings.view_sync_interval_seconds, lambda: sync(services), stop),
        _every("session expiry", SESSION_CLEANUP_SECONDS, lambda: expire_sessions(services), stop),
    )
