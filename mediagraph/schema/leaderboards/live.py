"""Live leaderboards: the pushed types and the subscriptions (the shared ticker is in `subscriptions`)."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import strawberry
from strawberry.types import Info

from mediagraph.context import Context
from mediagraph.ids import decode_id, to_global_id
from mediagraph.resolvers import leaderboards as resolvers
from mediagraph.resolvers.leaderboards.live import EntryState, TopState
from mediagraph.resolvers.leaderboards.store import Board
from mediagraph.schema.leaderboards import Leaderboard, LeaderboardEntry


@strawberry.type(
    description="The top of a leaderboard's current period, pushed whenever it changes. The entries and the "
    "leaderboard are Nodes, so a normalized cache updates every copy of them."
)
class LeaderboardTop:
    board: strawberry.Private[Board]
    name: str
    period_key: str = strawberry.field(description="The period's key, as `Leaderboard.periodKey`.")
    period: str = strawberry.field(description="The period's key.", deprecation_reason="Renamed `periodKey`.")
    entries: list[LeaderboardEntry]

    @classmethod
    def of(cls, state: TopState) -> LeaderboardTop:
        board = state.board
        entries = [LeaderboardEntry.of(board, entry, state.users.get(entry.user_id)) for entry in state.entries]
        key = board.window.key
        return cls(board=board, name=board.definition.name, period_key=key, period=key, entries=entries)

    @strawberry.field(
        description="The period pushed. Its fields are read when the push is sent: `top(first:)` selected "
        "here refreshes that cached connection too."
    )
    def leaderboard(self) -> Leaderboard:
        return Leaderboard.of(self.board)


@strawberry.type(description="A user's standing on a leaderboard's current period, pushed whenever it changes.")
class LeaderboardEntryUpdate:
    board: strawberry.Private[Board]
    name: str
    period_key: str = strawberry.field(description="The period's key, as `Leaderboard.periodKey`.")
    period: str = strawberry.field(description="The period's key.", deprecation_reason="Renamed `periodKey`.")
    user_id: strawberry.ID
    entry: LeaderboardEntry | None = strawberry.field(description="Null while the user has no score in this period.")

    @classmethod
    def of(cls, state: EntryState) -> LeaderboardEntryUpdate:
        board = state.board
        return cls(
            board=board,
            name=board.definition.name,
            period_key=board.window.key,
            period=board.window.key,
            user_id=strawberry.ID(to_global_id("User", state.user_id)),
            entry=LeaderboardEntry.of(board, state.entry, state.user) if state.entry is not None else None,
        )

    @strawberry.field(description="The period pushed.")
    def leaderboard(self) -> Leaderboard:
        return Leaderboard.of(self.board)


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
