"""Daily hot media boards in Redis: their days, their rebuild from PostgreSQL, their finalisation.

Background logic taking `services`, shared by the `hot` worker and the queries: scores
are kept live from the engagement stream by `workers.hot`; a day missing from Redis is
recomputed from the database, one small query per engagement source.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, time, timedelta

from mediagraph.db.base import utcnow
from mediagraph.db.comments import store as comment_store
from mediagraph.db.media import EXISTING_MEDIA
from mediagraph.db.views import store as view_store
from mediagraph.events import EngagementKind
from mediagraph.ids import snowflake_floor, snowflake_time
from mediagraph.keys.hot import day_changed_channel, day_rebuild_lock, day_scores, day_state
from mediagraph.keys.hot.lua import FINALIZE, READ_TOP
from mediagraph.services import Services
from mediagraph.settings import Settings

TOP = 10
WEIGHTS = {EngagementKind.LIKE: 3, EngagementKind.COMMENT: 2, EngagementKind.VIEW: 1}
REBUILD_LOCK_MS = 60_000
INSTALL_CHUNK = 1_000

# One source per engagement kind: counts per media id for ids in [first_id, end_id).
HotSource = Callable[[Services, int, int], Awaitable[dict[int, int]]]


SOURCES: dict[EngagementKind, HotSource] = {
    EngagementKind.VIEW: lambda services, first, end: view_store.flushed_view_counts_between(services.databases, first, end),
    EngagementKind.LIKE: lambda services, first, end: view_store.like_counts_between(services.databases, first, end),
    EngagementKind.COMMENT: comment_store.comment_counts_between,
}


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def media_day(media_id: int) -> date:
    """The day a media id was created on: snowflakes carry their creation time."""
    return snowflake_time(media_id).date()


def live_until(settings: Settings, day: date) -> datetime:
    return _midnight(day + timedelta(days=1)) + timedelta(seconds=settings.hot_live_grace_seconds)


def kept_until(settings: Settings, day: date) -> datetime:
    return _midnight(day + timedelta(days=settings.hot_history_days)) + timedelta(
        seconds=settings.hot_live_grace_seconds
    )


def kept_days(settings: Settings, now: datetime) -> list[date]:
    """Today first, then each earlier day still kept."""
    today = now.astimezone(UTC).date()
    return [today - timedelta(days=n) for n in range(settings.hot_history_days)]


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


async def scores_from_database(services: Services, day: date) -> dict[int, int]:
    first_id, end_id = snowflake_floor(_midnight(day)), snowflake_floor(_midnight(day + timedelta(days=1)))
    counts = await asyncio.gather(*(source(services, first_id, end_id) for source in SOURCES.values()))
    totals: dict[int, int] = defaultdict(int)
    for kind, per_media in zip(SOURCES, counts, strict=True):
        for media_id, count in per_media.items():
            totals[media_id] += WEIGHTS[kind] * count
    return dict(totals)


async def rebuild_day(services: Services, day: date, *, now: datetime | None = None) -> None:
    """Recompute a day from the database; concurrent callers wait for the one that does it.

    A live day records the Redis time it was read as of: events stamped earlier are
    already in the database's counts and are acknowledged without being applied again.
    """
    redis, keys, settings = services.redis, services.keys, services.settings
    now = now or utcnow()
    lock, scores_key, state_key = day_rebuild_lock(keys, day), day_scores(keys, day), day_state(keys, day)
    token = uuid.uuid4().hex
    if not await redis.set(lock, token, nx=True, px=REBUILD_LOCK_MS):
        for _ in range(REBUILD_LOCK_MS // 20):
            if not await redis.exists(lock):
                return
            await asyncio.sleep(0.02)
        return
    try:
        await redis.delete(state_key)
        seconds, micros = await redis.time()
        scores = await scores_from_database(services, day)
        live = now < live_until(settings, day)
        if not live:
            # Counts of a deleted media may outlive it (its comments on a shard that was down):
            # a final board keeps only its top, so it must be made of media that still exist.
            existing = await _existing(services, [media_id for media_id, score in scores.items() if score > 0])
            best = sorted(((score, media_id) for media_id, score in scores.items() if media_id in existing), reverse=True)
            scores = {media_id: score for score, media_id in best[:TOP]}
        await redis.unlink(scores_key)
        items = list(scores.items())
        for start in range(0, len(items), INSTALL_CHUNK):
            await redis.zadd(
                scores_key, {str(media_id): score for media_id, score in items[start : start + INSTALL_CHUNK]}
            )
        expire_ms = _ms(kept_until(settings, day))
        await redis.pexpireat(scores_key, expire_ms)
        state = f"live:{seconds * 1000 + micros // 1000}" if live else "final"
        await redis.set(state_key, state, pxat=expire_ms)
    finally:
        if await redis.get(lock) == token.encode():
            await redis.delete(lock)
    await announce_day(services, day)


async def finalize_day(services: Services, day: date) -> bool:
    keys = [day_scores(services.keys, day), day_state(services.keys, day)]
    expire_ms = _ms(kept_until(services.settings, day))
    finalized = bool(await FINALIZE.run(services.redis, keys, [TOP, expire_ms]))
    if finalized:
        await announce_day(services, day)
    return finalized


async def announce_day(services: Services, day: date) -> None:
    """Tell `hotMediaUpdated` listeners that the day may look different now."""
    await services.bus.publish(day_changed_channel(services.keys, day), {"day": day.isoformat()})


async def _existing(services: Services, media_ids: list[int]) -> set[int]:
    if not media_ids:
        return set()
    rows = await services.databases.main_reads.fetch(EXISTING_MEDIA, media_ids)
    return {row["id"] for row in rows}


async def read_top(services: Services, day: date, *, count: int = TOP) -> list[bytes]:
    """The day's state and best `count` media with their scores (rebuilt from PostgreSQL if Redis lacks it)."""
    keys = [day_scores(services.keys, day), day_state(services.keys, day)]
    reply: list[bytes] = await READ_TOP.run(services.redis, keys, [count])
    if not reply:
        await rebuild_day(services, day)
        reply = await READ_TOP.run(services.redis, keys, [count])
    return reply


async def forget_media(services: Services, day: date, media_ids: list[int]) -> None:
    """Takes media that no longer exist off a day's board, so the next best move up."""
    if media_ids:
        await services.redis.zrem(day_scores(services.keys, day), *map(str, media_ids))
