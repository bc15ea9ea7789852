"""Daily hot media: the top 10 media created each day (UTC) by likes × 3 + comments × 2 + views.

Scores are kept live from the engagement stream by `workers.hot`; a day missing from
Redis is recomputed from the database, one small query per engagement source.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from mediagraph.context import Context
from mediagraph.dataloaders.media import MediaByIdLoader
from mediagraph.db.base import utcnow
from mediagraph.db.media import Media
from mediagraph.errors import BadUserInput
from mediagraph.events import EngagementKind
from mediagraph.ids import snowflake_floor, snowflake_time
from mediagraph.keys.hot import day_rebuild_lock, day_scores, day_state
from mediagraph.keys.hot.lua import FINALIZE, READ_TOP
from mediagraph.resolvers import comments, views
from mediagraph.services import Services
from mediagraph.settings import Settings

TOP = 10
WEIGHTS = {EngagementKind.LIKE: 3, EngagementKind.COMMENT: 2, EngagementKind.VIEW: 1}
REBUILD_LOCK_MS = 60_000
INSTALL_CHUNK = 1_000

# One source per engagement kind: counts per media id for ids in [first_id, end_id).
HotSource = Callable[[Services, int, int], Awaitable[dict[int, int]]]


SOURCES: dict[EngagementKind, HotSource] = {
    EngagementKind.VIEW: views.flushed_view_counts_between,
    EngagementKind.LIKE: views.like_counts_between,
    EngagementKind.COMMENT: comments.comment_counts_between,
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
            best = sorted(((score, media_id) for media_id, score in scores.items() if score > 0), reverse=True)
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


async def finalize_day(services: Services, day: date) -> bool:
    keys = [day_scores(services.keys, day), day_state(services.keys, day)]
    expire_ms = _ms(kept_until(services.settings, day))
    return bool(await FINALIZE.run(services.redis, keys, [TOP, expire_ms]))


@dataclass(frozen=True)
class HotEntry:
    rank: int
    media: Media
    score: int


@dataclass(frozen=True)
class HotDay:
    day: date
    final: bool
    entries: list[HotEntry]


def _checked_day(settings: Settings, day: date | None) -> date:
    kept = kept_days(settings, utcnow())
    chosen = day or kept[0]
    if chosen not in kept:
        raise BadUserInput(
            f"Hot media are kept for the last {settings.hot_history_days} days (UTC): {kept[-1]} to {kept[0]}.",
            argument="date",
        )
    return chosen


async def _read_top(services: Services, day: date) -> list[bytes]:
    keys = [day_scores(services.keys, day), day_state(services.keys, day)]
    reply: list[bytes] = await READ_TOP.run(services.redis, keys, [TOP])
    if not reply:
        await rebuild_day(services, day)
        reply = await READ_TOP.run(services.redis, keys, [TOP])
    return reply


async def hot_media(context: Context, *, day: date | None) -> HotDay:
    chosen = _checked_day(context.settings, day)
    reply = await _read_top(context.services, chosen)
    state = reply[0].decode() if reply else ""
    ranked = [(int(reply[n]), int(float(reply[n + 1]))) for n in range(1, len(reply), 2)]
    rows = await context.loader(MediaByIdLoader).load_many([media_id for media_id, _ in ranked])
    # Deleted media drop out; the others keep their places.
    present = [(row, score) for row, (_, score) in zip(rows, ranked, strict=True) if row is not None]
    entries = [HotEntry(rank=n, media=row, score=score) for n, (row, score) in enumerate(present, start=1)]
    return HotDay(day=chosen, final=state == "final", entries=entries)


async def hot_media_history(context: Context, *, days: int) -> list[HotDay]:
    kept = context.settings.hot_history_days
    if not 1 <= days <= kept:
        raise BadUserInput(f"`days` must be between 1 and {kept}.", argument="days")
    wanted = kept_days(context.settings, utcnow())[:days]
    return list(await asyncio.gather(*(hot_media(context, day=day) for day in wanted)))
