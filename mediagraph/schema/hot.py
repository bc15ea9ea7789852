from __future__ import annotations

from datetime import date

import strawberry
from strawberry.types import Info

from mediagraph.context import Context
from mediagraph.resolvers import hot as resolvers
from mediagraph.resolvers.hot import HotDay
from mediagraph.schema.media import Media


@strawberry.type
class HotMediaEntry:
    rank: int
    score: float = strawberry.field(
        description="Likes × 3 + comments × 2 + views (an integer; a Float because it may exceed 2^31)."
    )
    media: Media


@strawberry.type(description="The day's hottest media among those created that day (UTC).")
class HotMediaDay:
    date: date
    final: bool = strawberry.field(description="True once the day is over and its top 10 no longer changes.")
    entries: list[HotMediaEntry] = strawberry.field(description="At most 10, hottest first; ties: newer media first.")

    @classmethod
    def of(cls, day: HotDay) -> HotMediaDay:
        entries = [
            HotMediaEntry(rank=entry.rank, score=entry.score, media=Media.from_row(entry.media))
            for entry in day.entries
        ]
        return cls(date=day.day, final=day.final, entries=entries)


@strawberry.type
class HotQueries:
    @strawberry.field(description="The top 10 media created on `date` (UTC; today by default), kept 7 days.")
    async def hot_media(self, info: Info[Context, None], date: date | None = None) -> HotMediaDay:
        return HotMediaDay.of(await resolvers.hot_media(info.context, day=date))

    @strawberry.field(description="The hot media of each of the last `days` days, today first.")
    async def hot_media_history(self, info: Info[Context, None], days: int = 7) -> list[HotMediaDay]:
        return [HotMediaDay.of(day) for day in await resolvers.hot_media_history(info.context, days=days)]
