"""Live leaderboards: the pushed types and the subscriptions (the shared ticker is in `subscriptions`)."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import strawberry
from strawberry.types import Info

from mediagraph.context import Context
from mediagraph.ids import decode_id, to_global_id
from mediagraph.resolvers import leaderboards as resolvers
from mediagraph.resolvers.leaderboards.live import EntryState, TopState
from mediagraph.schema.leaderboards import LeaderboardEntry


@strawberry.type(description="The top of a leaderboard's current period, pushed whenever it changes.")
class LeaderboardTop:
    name: str
    period: str
    entries: list[LeaderboardEntry]

    @classmethod
    def of(cls, state: TopState) -> LeaderboardTop:
        entries = [LeaderboardEntry.of(entry, state.users.get(entry.user_id)) for entry in state.entries]
        return cls(name=state.board.definition.name, period=state.board.window.key, entries=entries)


@strawberry.type(description="A user's standing on a leaderboard's current period, pushed whenever it changes.")
class LeaderboardEntryUpdate:
    name: str
    period: str
    user_id: strawberry.ID
    entry: LeaderboardEntry | None = strawberry.field(description="Null while the user has no score in this period.")

    @classmethod
    def of(cls, state: EntryState) -> LeaderboardEntryUpdate:
        return cls(
            name=state.board.definition.name,
            period=state.board.window.key,
            user_id=strawberry.ID(to_global_id("User", state.user_id)),
            entry=LeaderboardEntry.of(state.entry, state.user) if state.entry is not None else None,
        )


@strawberry.type
class LeaderboardSubscriptions:
    @strawberry.subscription(description="The top `first` entries of the current period, whenever they change.")
    async def leaderboard_top(
        self, info: Info[Context, None], name: str, first: int | None = 10
    ) -> AsyncGenerator[LeaderboardTop, None]:
        async for state in resolvers.watch_top(info.context, name=name, first=first):
            yield LeaderboardTop.of(state)

    @strawberry.subscription(description="A user's rank and score in the current period, whenever they change.")
    async def leaderboard_entry(
        self, info: Info[Context, None], name: str, user_id: strawberry.ID
    ) -> AsyncGenerator[LeaderboardEntryUpdate, None]:
        async for state in resolvers.watch_entry(info.context, name=name, user_id=decode_id(user_id, "User")):
            yield LeaderboardEntryUpdate.of(state)
