"""Daily hot media: the top 10 media created each day (UTC) by likes × 3 + comments × 2 + views."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import date

from mediagraph.context import Context
from mediagraph.dataloaders.media import MediaByIdLoader
from mediagraph.db.base import utcnow
from mediagraph.db.media import Media
from mediagraph.errors import BadUserInput
from mediagraph.resolvers.hot.days import TOP, forget_media, kept_days, read_top, rebuild_day
from mediagraph.settings import Settings
from mediagraph.subscriptions import hot as live


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


async def hot_media(context: Context, *, day: date | None) -> HotDay:
    chosen = _checked_day(context.settings, day)
    services = context.services
    count, pruned, recounted = TOP, False, False
    while True:
        reply = await read_top(services, chosen, count=count)
        state = reply[0].decode() if reply else ""
        ranked = [(int(reply[n]), int(float(reply[n + 1]))) for n in range(1, len(reply), 2)]
        rows = await context.loader(MediaByIdLoader).load_many([media_id for media_id, _ in ranked])
        present = [(row, score) for row, (_, score) in zip(rows, ranked, strict=True) if row is not None]
        gone = [media_id for row, (media_id, _) in zip(rows, ranked, strict=True) if row is None]
        # A deleted media leaves the board as soon as its deletion is seen, and the next best
        # move up: the list is back to 10 right after the delete commits.
        await forget_media(services, chosen, gone)
        pruned = pruned or bool(gone)
        if len(present) >= TOP or len(ranked) < count:
            if pruned and len(present) < TOP and state == "final" and not recounted:
                # A final board keeps only its top 10: who comes next only a recount knows.
                await rebuild_day(services, chosen)
                count, recounted = TOP, True
                continue
            break
        count += len(gone)
    entries = [HotEntry(rank=n, media=row, score=score) for n, (row, score) in enumerate(present[:TOP], start=1)]
    return HotDay(day=chosen, final=state == "final", entries=entries)


async def hot_media_history(context: Context, *, days: int) -> list[HotDay]:
    kept = context.settings.hot_history_days
    if not 1 <= days <= kept:
        raise BadUserInput(f"`days` must be between 1 and {kept}.", argument="days")
    wanted = kept_days(context.settings, utcnow())[:days]
    return list(await asyncio.gather(*(hot_media(context, day=day) for day in wanted)))


async def hot_media_updates(context: Context, *, day: date | None) -> AsyncIterator[HotDay]:
    """The day's top 10 at once, then whenever it changes (its order, a score, or it becoming final).

    Without `day`, today (UTC): when the date changes the subscription moves on to the new day.
    """
    if day is not None:
        _checked_day(context.settings, day)
    shown: tuple[object, ...] | None = None
    while True:
        watching = day or kept_days(context.settings, utcnow())[0]
        async with contextlib.aclosing(live.day_notices(context.services, watching)) as notices:
            async for _ in notices:
                # Rows an earlier round loaded may be stale by now.
                context.forget_loaded()
                current = await hot_media(context, day=watching)
                state = (current.day, current.final, [(entry.media.id, entry.score) for entry in current.entries])
                if state != shown:
                    shown = state
                    yield current
                if day is None and kept_days(context.settings, utcnow())[0] != watching:
                    break
