"""Views worker: flush pending view counts to PostgreSQL, sync the sort columns, forget old batch ids.

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

from sqlalchemy.dialects.postgresql import insert
from sqlmodel import col

from mediagraph.dataloaders.views import view_buffer
from mediagraph.db.base import utcnow
from mediagraph.db.views import MediaViewBatch, store
from mediagraph.events import EngagementEvent, EngagementKind, publish_engagements
from mediagraph.keys.views import Batch
from mediagraph.observability.metrics import Lag
from mediagraph.services import Services
from mediagraph.subscriptions.views import announce

NAME = "views"

log = logging.getLogger(__name__)

SYNC_CHUNK = 10_000
BATCH_CLEANUP_SECONDS = 60.0
# Unsynced changes counted for the metrics at most; a backlog this deep is alarming at any size.
LAG_COUNT_LIMIT = 1_000_000
# Applied-batch ids are kept long past any lease, so a batch reclaimed late still applies once.
APPLIED_BATCH_RETENTION = timedelta(days=7)

async def apply_batch(services: Services, batch: Batch) -> bool:
    """Add the batch to PostgreSQL unless it was already; True if this call applied it."""
    async with services.databases.main_session() as session, session.begin():
        first = await session.execute(
            insert(MediaViewBatch)
            .values(id=batch.id, applied_at=utcnow())
            .on_conflict_do_nothing()
            .returning(col(MediaViewBatch.id))
        )
        if first.first() is None:
            return False
        await store.apply_view_deltas(session, batch.deltas)
    return True


async def finish_batch(services: Services, batch: Batch) -> int:
    """Apply, drop, then tell the hot-media stream and live subscribers; the views this call applied."""
    applied = await apply_batch(services, batch)
    await view_buffer(services).drop(batch)
    if not applied:
        return 0
    events = [EngagementEvent(EngagementKind.VIEW, media_id, views) for media_id, views in batch.deltas.items()]
    await publish_engagements(services.redis, services.keys, events)
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
        return await store.sync_count_changes(session, chunk=SYNC_CHUNK)


async def sync(services: Services) -> int:
    consumed = 0
    while True:
        taken = await sync_once(services)
        consumed += taken
        if taken < SYNC_CHUNK:
            return consumed


async def forget_old_batches(services: Services) -> None:
    """Forget applied-batch ids long past any lease (pagination sessions expire in Redis by themselves)."""
    async with services.databases.main_session() as session, session.begin():
        await store.forget_applied_batches(session, before=utcnow() - APPLIED_BATCH_RETENTION)


async def lag(services: Services) -> list[Lag]:
    """Views waiting to be flushed (Redis), and count changes waiting to be synced (PostgreSQL)."""
    waiting = await view_buffer(services).backlog()
    async with services.databases.main_session() as session:
        unsynced = await store.count_changes_waiting(session, limit=LAG_COUNT_LIMIT)
    return [Lag(NAME, "flush", entries=waiting), Lag(NAME, "sync", entries=unsynced)]


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
        _every("batch cleanup", BATCH_CLEANUP_SECONDS, lambda: forget_old_batches(services), stop),
    )
