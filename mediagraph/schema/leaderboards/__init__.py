from __future__ import annotations

from datetime import datetime

import strawberry
from strawberry.types import Info

from mediagraph.context import Context
from mediagraph.db.leaderboards import Leaderboard as LeaderboardRow
from mediagraph.db.leaderboards import LeaderboardRepartition as RepartitionRow
from mediagraph.db.leaderboards import Period, RepartitionState, ScoreOperator, SortOrder
from mediagraph.db.users import User as UserRow
from mediagraph.ids import decode_id, snowflake_time, to_global_id
from mediagraph.resolvers import leaderboards as resolvers
from mediagraph.resolvers import users as user_resolvers
from mediagraph.resolvers.leaderboards import Accepted, definitions
from mediagraph.resolvers.leaderboards.periods import window_code
from mediagraph.resolvers.leaderboards.store import Board, RankedEntry
from mediagraph.resolvers.pagination import Page
from mediagraph.schema.relay import Edge, Node, PageInfo, register_node, requested
from mediagraph.schema.scalars import Count
from mediagraph.schema.users import User

SortOrderEnum = strawberry.enum(
    SortOrder, name="LeaderboardSortOrder", description="DESC: the highest score ranks first; ASC: the lowest."
)
ScoreOperatorEnum = strawberry.enum(
    ScoreOperator,
    name="ScoreOperator",
    description="How a submission combines with a user's score: SET replaces it, BEST keeps the better, "
    "INCREMENT adds to a running total.",
)
PeriodEnum = strawberry.enum(
    Period, name="LeaderboardPeriod", description="How often the board starts afresh (UTC; weeks start on Monday)."
)

RepartitionStateEnum = strawberry.enum(
    RepartitionState,
    name="LeaderboardRepartitionState",
    description="COPYING: reads use the old bounds while the board is laid out again under the new ones; "
    "SWITCHED: reads use the new bounds, the old layout is being retired; DONE.",
)


@strawberry.type(
    description="A move of a board to new partition bounds, made while scores keep arriving; ranks stay exact "
    "before, during and after it."
)
class LeaderboardRepartition(Node):
    state: RepartitionStateEnum  # type: ignore[valid-type]
    partition_bounds: list[float] = strawberry.field(description="The bounds the board moves to.")
    previous_bounds: list[float]
    moved_entries: Count = strawberry.field(description="Entries laid out under the new bounds so far.")
    total_entries: Count = strawberry.field(
        description="Entries to lay out: those of the periods held in Redis when the copy began (others are "
        "laid out when first read)."
    )
    started_at: datetime
    finished_at: datetime | None = strawberry.field(description="Null until the move is DONE.")

    @classmethod
    def from_row(cls, row: RepartitionRow) -> LeaderboardRepartition:
        return cls(
            id=strawberry.ID(to_global_id("LeaderboardRepartition", row.leaderboard_id, row.generation)),
            state=row.phase,
            partition_bounds=list(row.partition_bounds),
            previous_bounds=list(row.previous_bounds),
            moved_entries=row.moved_entries,
            total_entries=max(row.total_entries, row.moved_entries),
            started_at=row.started_at,
            finished_at=row.finished_at,
        )


async def _fetch_repartition(context: Context, board_id: int, generation: int) -> LeaderboardRepartition | None:
    row = await definitions.repartition_by_key(context, board_id, generation)
    return LeaderboardRepartition.from_row(row) if row is not None else None


register_node("LeaderboardRepartition", _fetch_repartition, id_parts=2)


def board_ids(board: Board) -> tuple[int, int]:
    """What names a board in global ids: its definition and its period (`periods.window_code`)."""
    return board.definition.id, window_code(board.window)


@strawberry.type(
    description="A ranked user on one period of a leaderboard. Its id names the board, the period and the user, "
    "so pushes and reads of the same standing update one cached object."
)
class LeaderboardEntry(Node):
    rank: int = strawberry.field(description="1 for the best; equal scores rank by who reached them first.")
    score: float
    reached_at: datetime = strawberry.field(description="When the user reached this score.")
    board: strawberry.Private[Board]
    user_raw_id: strawberry.Private[int]
    user_row: strawberry.Private[UserRow | None]

    @classmethod
    def of(cls, board: Board, entry: RankedEntry, user: UserRow | None = None) -> LeaderboardEntry:
        return cls(
            id=strawberry.ID(to_global_id("LeaderboardEntry", *board_ids(board), entry.user_id)),
            rank=entry.rank,
            score=entry.score,
            reached_at=snowflake_time(entry.reached_id),
            board=board,
            user_raw_id=entry.user_id,
            user_row=user,
        )

    @strawberry.field
    def user_id(self) -> strawberry.ID:
        return strawberry.ID(to_global_id("User", self.user_raw_id))

    @strawberry.field(description="Null if the account no longer exists.")
    async def user(self, info: Info[Context, None]) -> User | None:
        row = self.user_row or await user_resolvers.user_by_id(info.context, self.user_raw_id)
        return User.from_row(row) if row is not None else None

    @strawberry.field(description="The board and period this standing is on.")
    def leaderboard(self) -> Leaderboard:
        return Leaderboard.of(self.board)


async def _fetch_entry(context: Context, definition_id: int, period_code: int, user_id: int) -> LeaderboardEntry | None:
    board = await resolvers.board_by_code(context, definition_id=definition_id, period_code=period_code)
    if board is None:
        return None
    found = await resolvers.entry(context, board, user_id=user_id)
    return LeaderboardEntry.of(board, found) if found is not None else None


register_node("LeaderboardEntry", _fetch_entry, id_parts=3)


@strawberry.type
class LeaderboardEntryConnection:
    edges: list[Edge[LeaderboardEntry]]
    page_info: PageInfo
    total_count: Count

    @classmethod
    def from_page(cls, board: Board, page: Page[RankedEntry], total: int) -> LeaderboardEntryConnection:
        return cls(
            edges=[Edge(cursor=cursor, node=LeaderboardEntry.of(board, entry)) for cursor, entry in page.items],
            page_info=PageInfo.of(page),
            total_count=total,
        )


@strawberry.type(
    description="A leaderboard as defined: immutable once created, since stored scores depend on it; only its "
    "partition bounds may move (`repartitionLeaderboard`)."
)
class LeaderboardDefinition(Node):
    row: strawberry.Private[LeaderboardRow]
    name: str
    sort_order: SortOrderEnum  # type: ignore[valid-type]
    operator: ScoreOperatorEnum  # type: ignore[valid-type]
    period: PeriodEnum  # type: ignore[valid-type]
    partition_bounds: list[float] = strawberry.field(
        description="Ascending score boundaries: N of them split the board into N + 1 partitions."
    )
    min_score: float
    max_score: float
    created_at: datetime

    @classmethod
    def from_row(cls, row: LeaderboardRow) -> LeaderboardDefinition:
        return cls(
            id=strawberry.ID(to_global_id("LeaderboardDefinition", row.id)),
            row=row,
            name=row.name,
            sort_order=row.order,
            operator=row.score_operator,
            period=row.period_kind,
            partition_bounds=list(row.partition_bounds),
            min_score=row.min_score,
            max_score=row.max_score,
            created_at=row.created_at,
        )

    @strawberry.field(description="The period running now.")
    def current(self, info: Info[Context, None]) -> Leaderboard:
        return Leaderboard.of(resolvers.current_board(info.context.services, self.row))

    @strawberry.field(
        description="The newest move to other partition bounds (`repartitionLeaderboard`); null if the board "
        "was never re-partitioned."
    )
    async def repartition(self, info: Info[Context, None]) -> LeaderboardRepartition | None:
        row = await definitions.latest_repartition(info.context, self.row.id)
        return LeaderboardRepartition.from_row(row) if row is not None else None


async def _fetch_definition(context: Context, raw_id: int) -> LeaderboardDefinition | None:
    row = await definitions.definition_by_id(context, raw_id)
    return LeaderboardDefinition.from_row(row) if row is not None else None


register_node("LeaderboardDefinition", _fetch_definition)


@strawberry.type(
    description="One period of a leaderboard. Every read is O(log n) in the board's size. Its id names the "
    "board and the period."
)
class Leaderboard(Node):
    board: strawberry.Private[Board]
    name: str
    period_key: str = strawberry.field(
        description="This period's key: `all`, `2026-11-23`, `2026-W48` or `2026-11` (as `leaderboard(period:)` takes)."
    )
    period: str = strawberry.field(
        description="This period's key.",
        deprecation_reason="Renamed `periodKey`: `period` is the LeaderboardPeriod enum on LeaderboardDefinition.",
    )
    starts_at: datetime | None = strawberry.field(description="When the period starts; null for the all-time period.")
    ends_at: datetime | None = strawberry.field(
        description="When the period ends (exclusive); null for the all-time period."
    )

    @classmethod
    def of(cls, board: Board) -> Leaderboard:
        window = board.window
        return cls(
            id=strawberry.ID(to_global_id("Leaderboard", *board_ids(board))),
            board=board,
            name=board.definition.name,
            period_key=window.key,
            period=window.key,
            starts_at=window.starts_at,
            ends_at=window.ends_at,
        )

    @strawberry.field
    def definition(self) -> LeaderboardDefinition:
        return LeaderboardDefinition.from_row(self.board.definition)

    @strawberry.field(description="How many users have a score in this period (as `top.totalCount`).")
    async def entry_count(self, info: Info[Context, None]) -> Count:
        return await resolvers.size(info.context, self.board)

    @strawberry.field(
        description="How many users have a score in this period.",
        deprecation_reason="Renamed `entryCount`: counts are named …Count.",
    )
    async def size(self, info: Info[Context, None]) -> Count:
        return await resolvers.size(info.context, self.board)

    @strawberry.field(description="Entries in rank order.")
    async def top(
        self,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> LeaderboardEntryConnection:
        request = requested(info.context.settings, first=first, after=after, last=last, before=before)
        page, total = await resolvers.top(info.context, self.board, request=request)
        return LeaderboardEntryConnection.from_page(self.board, page, total)

    @strawberry.field(description="The user's rank and score; null when the user has no score here.")
    async def entry(self, info: Info[Context, None], user_id: strawberry.ID) -> LeaderboardEntry | None:
        found = await resolvers.entry(info.context, self.board, user_id=decode_id(user_id, "User"))
        return LeaderboardEntry.of(self.board, found) if found is not None else None

    @strawberry.field(
        description="Up to `radius` entries above the user, the user, and up to `radius` below, in rank order; "
        "fewer at the top and bottom, and none when the user has no score here."
    )
    async def around(
        self, info: Info[Context, None], user_id: strawberry.ID, radius: int = 5
    ) -> list[LeaderboardEntry]:
        found = await resolvers.around(info.context, self.board, user_id=decode_id(user_id, "User"), radius=radius)
        return [LeaderboardEntry.of(self.board, entry) for entry in found]


async def _fetch_board(context: Context, definition_id: int, period_code: int) -> Leaderboard | None:
    board = await resolvers.board_by_code(context, definition_id=definition_id, period_code=period_code)
    return Leaderboard.of(board) if board is not None else None


register_node("Leaderboard", _fetch_board, id_parts=2)


@strawberry.type
class SubmitScorePayload:
    accepted: strawberry.Private[Accepted]
    changed: bool = strawberry.field(
        description="Whether the stored score changed (false when BEST was not beaten, or SET repeated it)."
    )

    @strawberry.field
    def leaderboard(self) -> Leaderboard:
        return Leaderboard.of(self.accepted.board)

    @strawberry.field(
        description="The user's standing after the submission; null (with an error) when the board cannot "
        "be read right now: the score is recorded all the same."
    )
    async def entry(self, info: Info[Context, None]) -> LeaderboardEntry | None:
        found = await resolvers.entry(info.context, self.accepted.board, user_id=self.accepted.user_ids[0])
        if found is None:
            raise RuntimeError("a submitted score is missing from its board")
        return LeaderboardEntry.of(self.accepted.board, found)


@strawberry.input
class ScoreInput:
    user_id: strawberry.ID
    score: float


@strawberry.type
class SubmitScoresPayload:
    accepted: strawberry.Private[Accepted]
    changed_count: Count = strawberry.field(description="How many submissions changed a stored score.")
    changed: Count = strawberry.field(
        description="How many submissions changed a stored score.",
        deprecation_reason="Renamed `changedCount`: `changed` is a Boolean on SubmitScorePayload.",
    )

    @strawberry.field
    def leaderboard(self) -> Leaderboard:
        return Leaderboard.of(self.accepted.board)

    @strawberry.field(
        description="Each submitting user's standing afterwards, in order of first submission; null (with an error) "
        "when the board cannot be read right now: the scores are recorded all the same."
    )
    async def entries(self, info: Info[Context, None]) -> list[LeaderboardEntry] | None:
        found = await resolvers.entries(info.context, self.accepted.board, user_ids=self.accepted.user_ids)
        return [LeaderboardEntry.of(self.accepted.board, entry) for entry in found if entry is not None]


@strawberry.type
class LeaderboardDefinitionConnection:
    edges: list[Edge[LeaderboardDefinition]]
    page_info: PageInfo


@strawberry.type
class LeaderboardQueries:
    @strawberry.field(description="Leaderboard definitions, by name.")
    async def leaderboards(
        self,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> LeaderboardDefinitionConnection:
        request = requested(info.context.settings, first=first, after=after, last=last, before=before)
        page = await definitions.leaderboards(info.context, request=request)
        return LeaderboardDefinitionConnection(
            edges=[Edge(cursor=cursor, node=LeaderboardDefinition.from_row(row)) for cursor, row in page.items],
            page_info=PageInfo.of(page),
        )

    @strawberry.field(
        description="One period of a leaderboard: `period` is its key or any date (YYYY-MM-DD) inside it; "
        "the current period by default. Null when no leaderboard has this name."
    )
    async def leaderboard(self, info: Info[Context, None], name: str, period: str | None = None) -> Leaderboard | None:
        board = await resolvers.leaderboard(info.context, name=name, period=period)
        return Leaderboard.of(board) if board is not None else None


@strawberry.type
class LeaderboardMutations:
    @strawberry.mutation(
        description="Define a leaderboard (service token). Repeating an identical definition returns it; "
        "a different one under an existing name is refused with CONFLICT."
    )
    async def define_leaderboard(
        self,
        info: Info[Context, None],
        name: str,
        sort_order: SortOrderEnum = SortOrder.DESC,  # type: ignore[valid-type]
        operator: ScoreOperatorEnum = ScoreOperator.BEST,  # type: ignore[valid-type]
        period: PeriodEnum = Period.ALL_TIME,  # type: ignore[valid-type]
        partition_bounds: list[float] | None = None,
        min_score: float | None = None,
        max_score: float | None = None,
    ) -> LeaderboardDefinition:
        row = await definitions.define_leaderboard(
            info.context,
            name=name,
            sort_order=sort_order,
            operator=operator,
            period=period,
            partition_bounds=partition_bounds or [],
            min_score=min_score,
            max_score=max_score,
        )
        return LeaderboardDefinition.from_row(row)

    @strawberry.mutation(
        description="Move a leaderboard to new partition bounds while it keeps taking scores (service token). "
        "Answers at once; the move runs in the background and `repartition` on the definition shows its "
        "progress. Asking again for the move under way returns it; other bounds while one runs: CONFLICT."
    )
    async def repartition_leaderboard(
        self, info: Info[Context, None], name: str, partition_bounds: list[float]
    ) -> LeaderboardDefinition:
        row = await definitions.repartition_leaderboard(info.context, name=name, partition_bounds=partition_bounds)
        return LeaderboardDefinition.from_row(row)

    @strawberry.mutation(
        description="Record a score for a user in the current period (service token only: users cannot "
        "set their own scores). Scores are doubles; integers are exact up to ±(2^53 − 1)."
    )
    async def submit_score(
        self, info: Info[Context, None], leaderboard: str, user_id: strawberry.ID, score: float
    ) -> SubmitScorePayload:
        accepted = await resolvers.submit_scores(
            info.context, leaderboard=leaderboard, scores=[(decode_id(user_id, "User"), score)]
        )
        return SubmitScorePayload(accepted=accepted, changed=accepted.changed > 0)

    @strawberry.mutation(
        description="Record up to 100 scores at once, in order (service token only). All or none: one "
        "invalid submission refuses the batch."
    )
    async def submit_scores(
        self, info: Info[Context, None], leaderboard: str, scores: list[ScoreInput]
    ) -> SubmitScoresPayload:
        pairs = [(decode_id(item.user_id, "User"), item.score) for item in scores]
        accepted = await resolvers.submit_scores(info.context, leaderboard=leaderboard, scores=pairs)
        return SubmitScoresPayload(accepted=accepted, changed_count=accepted.changed, changed=accepted.changed)
