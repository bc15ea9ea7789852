from __future__ import annotations

from collections.abc import AsyncGenerator
from datetime import date

import strawberry
from strawberry.types import Info

from mediagraph.context import Context
from mediagraph.errors import BadUserInput
from mediagraph.ids import to_global_id
from mediagraph.resolvers import hot as resolvers
from mediagraph.resolvers.hot import HotDay
from mediagraph.schema.extensions import SHARED_STATE
from mediagraph.schema.media import Media
from mediagraph.schema.relay import Node, register_node


@strawberry.type
class HotMediaEntry:
    rank: int
    score: float = strawberry.field(
        description="Likes × 3 + comments × 2 + views (an integer; a Float because it may exceed 2^31)."
    )
    media: Media


def day_number(day: date) -> int:
    """A day as the number a HotMediaDay id carries: 2026-11-25 is 20261125."""
    return day.year * 10_000 + day.month * 100 + day.day


@strawberry.type(description="The day's hottest media among those created that day (UTC).")
class HotMediaDay(Node):
    date: date
    final: bool = strawberry.field(description="True once the day is over and its top 10 no longer changes.")
    entries: list[HotMediaEntry] = strawberry.field(description="At most 10, hottest first; ties: newer media first.")

    @classmethod
    def of(cls, day: HotDay) -> HotMediaDay:
        entries = [
            HotMediaEntry(rank=entry.rank, score=entry.score, media=Media.from_row(entry.media))
            for entry in day.entries
        ]
        return cls(
            id=strawberry.ID(to_global_id("HotMediaDay", day_number(day.day))),
            date=day.day,
            final=day.final,
            entries=entries,
        )


async def _fetch_day(context: Context, number: int) -> HotMediaDay | None:
    try:
        day = date(number // 10_000, number // 100 % 100, number % 100)
        return HotMediaDay.of(await resolvers.hot_media(context, day=day))
    except (ValueError, BadUserInput):
        # Not a date, or a day no longer kept: as missing as any other unknown id.
        return None


register_node("HotMediaDay", _fetch_day)


@strawberry.type
class HotQueries:
    @strawberry.field(description="The top 10 media created on `date` (UTC; today by default), kept 7 days.")
    async def hot_media(self, info: Info[Context, None], date: date | None = None) -> HotMediaDay:
        return HotMediaDay.of(await resolvers.hot_media(info.context, day=date))

    @strawberry.field(description="The hot media of each of the last `days` days, today first.")
    async def hot_media_history(self, info: Info[Context, None], days: int = 7) -> list[HotMediaDay]:
        return [HotMediaDay.of(day) for day in await resolvers.hot_media_history(info.context, days=days)]


@strawberry.type
class HotSubscriptions:
    @strawberry.subscription(
        metadata=SHARED_STATE,
        description=(
            "The top 10 of `date` (UTC; by default today, moving on to each new day) at once, then whenever "
            "it changes: an entry's score or place, or the day becoming final. At most once a second."
        ),
    )
    async def hot_media_updated(
        self, info: Info[Context, None], date: date | None = None
    ) -> AsyncGenerator[HotMediaDay, None]:
        async for day in resolvers.hot_media_updates(info.context, day=date):
            yield HotMediaDay.of(day)
