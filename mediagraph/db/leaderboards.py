"""Leaderboard definitions, the durable score record every Redis board is rebuilt from,
and the progress of re-partitioning a board.

A definition never changes once created (everything in it decides how stored scores are
combined or ordered), except for its partition layout, which only a re-partitioning moves
(`resolvers/leaderboards/repartition.py`); processes cache definitions for
`leaderboard_definition_refresh_seconds`.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

import asyncpg
from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    String,
    bindparam,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import Field, col

from mediagraph.db.base import MainTable, snowflake_key, timestamp, utcnow
from mediagraph.db.writes import PerPool, StepWrites, WritePool, rounds_without_repeats

# Doubles hold every integer up to 2^53 exactly; scores are kept inside that range.
MAX_EXACT_SCORE = float(2**53 - 1)


class SortOrder(Enum):
    DESC = "DESC"
    ASC = "ASC"


class ScoreOperator(Enum):
    SET = "SET"
    BEST = "BEST"
    INCREMENT = "INCREMENT"


class Period(Enum):
    ALL_TIME = "ALL_TIME"
    DAILY = "DAILY"
    WEEKLY = "WEEKLY"
    MONTHLY = "MONTHLY"


class Leaderboard(MainTable, table=True):
    __tablename__ = "leaderboards"

    id: int = snowflake_key()  # type: ignore[assignment]
    name: str = Field(sa_column=Column(String(64), nullable=False, unique=True))
    sort_order: str = Field(sa_column=Column(String(8), nullable=False))
    operator: str = Field(sa_column=Column(String(16), nullable=False))
    period: str = Field(sa_column=Column(String(16), nullable=False))
    # N ascending boundaries split the score range into N + 1 partitions.
    # The layout readers use: its bounds and its generation (part of its Redis keys).
    partition_bounds: list[float] = Field(default_factory=list, sa_column=Column(ARRAY(Double), nullable=False))
    min_score: float = Field(sa_column=Column(Double, nullable=False))
    max_score: float = Field(sa_column=Column(Double, nullable=False))
    created_at: datetime = timestamp()  # type: ignore[assignment]
    layout_generation: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))
    # While a re-partitioning is under way, writers keep a second layout too: the next one
    # while it is copied (a higher generation), the previous one once readers switched.
    shadow_bounds: list[float] | None = Field(default=None, sa_column=Column(ARRAY(Double), nullable=True))
    shadow_generation: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))

    @property
    def order(self) -> SortOrder:
        return SortOrder(self.sort_order)

    @property
    def score_operator(self) -> ScoreOperator:
        return ScoreOperator(self.operator)

    @property
    def period_kind(self) -> Period:
        return Period(self.period)


class LeaderboardScore(MainTable, table=True):
    """One user's standing on one period of one board: the operator's result, not the submissions."""

    __tablename__ = "leaderboard_scores"
    __table_args__ = (Index("ix_leaderboard_scores_user_id", "user_id"),)

    leaderboard_id: int = Field(
        sa_column=Column(BigInteger, ForeignKey("leaderboards.id", ondelete="CASCADE"), primary_key=True)
    )
    # "all", "2026-11-23", "2026-W48" or "2026-11", as `leaderboard_periods` names them.
    period: str = Field(sa_column=Column(String(16), primary_key=True))
    user_id: int = Field(sa_column=Column(BigInteger, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True))
    score: float = Field(sa_column=Column(Double, nullable=False))
    # A snowflake taken when the score was reached: equal scores rank by it, earliest first.
    reached_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    # Bumped on every change; Redis applies a record only over an older version.
    version: int = Field(sa_column=Column(BigInteger, nullable=False))
    updated_at: datetime = timestamp()  # type: ignore[assignment]


@dataclass(frozen=True)
class ScoreRecord:
    user_id: int
    score: float
    reached_id: int
    version: int


class OutOfBounds(Exception):
    """An INCREMENT would take a user's running total outside the board's range."""

    def __init__(self, user_id: int) -> None:
        super().__init__(user_id)
        self.user_id = user_id


@functools.cache
def _upsert(operator: ScoreOperator, order: SortOrder) -> Any:
    """The submission statement of one kind of board, built once: the hot path only binds values
    (named `new_…`: UPDATE reserves the column names for its own parameters).

    A changed row gets the new reached id and a bumped version; an unchanged one (BEST
    not beaten, SET repeating the score, INCREMENT by zero or out of range) is left
    alone and the statement returns nothing.
    """
    table = LeaderboardScore.__table__  # type: ignore[attr-defined]
    statement = insert(table).values(
        leaderboard_id=bindparam("new_board_id"),
        period=bindparam("new_period"),
        user_id=bindparam("new_user_id"),
        score=bindparam("new_score"),
        reached_id=bindparam("new_reached_id"),
        version=1,
        updated_at=bindparam("new_now"),
    )
    submitted, current = statement.excluded.score, table.c.score
    if operator is ScoreOperator.INCREMENT:
        score = current + submitted
        changed = (submitted != 0) & score.between(bindparam("new_min_score"), bindparam("new_max_score"))
    else:
        score = submitted
        if operator is ScoreOperator.SET:
            changed = submitted != current
        else:
            changed = submitted > current if order is SortOrder.DESC else submitted < current
    values = {"score": score, "reached_id": statement.excluded.reached_id, "version": table.c.version + 1}
    return statement.on_conflict_do_update(
        index_elements=["leaderboard_id", "period", "user_id"],
        set_={**values, "updated_at": statement.excluded.updated_at},
        where=changed,
    ).returning(*_returned(table))


@functools.cache
def _move_total() -> Any:
    """INCREMENT by a step larger than the range: only an existing total may move, never start there."""
    table = LeaderboardScore.__table__  # type: ignore[attr-defined]
    total = table.c.score + bindparam("new_score")
    return (
        update(table)
        .where(
            table.c.leaderboard_id == bindparam("new_board_id"),
            table.c.period == bindparam("new_period"),
            table.c.user_id == bindparam("new_user_id"),
            total.between(bindparam("new_min_score"), bindparam("new_max_score")),
        )
        .values(
            score=total,
            reached_id=bindparam("new_reached_id"),
            version=table.c.version + 1,
            updated_at=bindparam("new_now"),
        )
        .returning(*_returned(table))
    )


def _replaces(operator: ScoreOperator, order: SortOrder) -> str:
    """When a SET or BEST submission (`excluded`) replaces the stored score (`s`), in SQL."""
    if operator is ScoreOperator.SET:
        return "excluded.score <> s.score"
    return "excluded.score > s.score" if order is SortOrder.DESC else "excluded.score < s.score"


@functools.cache
def _single_upsert(operator: ScoreOperator, order: SortOrder) -> str:
    """`_upsert` for one submission, as the hot path's prepared statement (`db/writes.py`).

    $1 board, $2 period, $3 user, $4 score, $5 reached id, $6 now; INCREMENT also takes
    $7 and $8, the board's range. Same rules as `_upsert`: only a change returns a row.
    """
    if operator is ScoreOperator.INCREMENT:
        score = "s.score + excluded.score"
        changed = "excluded.score <> 0 AND s.score + excluded.score BETWEEN $7 AND $8"
    else:
        score = "excluded.score"
        changed = _replaces(operator, order)
    return f"""
INSERT INTO leaderboard_scores AS s (leaderboard_id, period, user_id, score, reached_id, version, updated_at)
VALUES ($1, $2, $3, $4, $5, 1, $6)
ON CONFLICT (leaderboard_id, period, user_id) DO UPDATE
SET score = {score}, reached_id = excluded.reached_id, version = s.version + 1, updated_at = excluded.updated_at
WHERE {changed}
RETURNING user_id, score, reached_id, version
"""


class MissingUser(Exception):
    """A submission names a user who does not exist."""


async def record_score(
    writes: WritePool, *, board: Leaderboard, period: str, submission: Submission
) -> ScoreRecord | None:
    """One submission in one statement (no session): the record if it changed the stored score.

    Raises OutOfBounds as `record_scores` does; a step larger than the board's whole range
    goes through `record_scores` instead, which alone may move a total by it.
    """
    operator = board.score_operator
    incremented = operator is ScoreOperator.INCREMENT
    if _outside(board, submission.score):
        raise ValueError("a step beyond the range takes record_scores")
    args: list[Any] = [board.id, period, submission.user_id, submission.score, submission.reached_id, utcnow()]
    if incremented:
        args += [board.min_score, board.max_score]
    try:
        row = await writes.fetchrow(_single_upsert(operator, board.order), *args)
    except asyncpg.ForeignKeyViolationError:
        raise MissingUser from None
    if row is None:
        if incremented and submission.score != 0:
            raise OutOfBounds(submission.user_id)
        return None
    return ScoreRecord(*row)


@functools.cache
def _many_upsert(operator: ScoreOperator, order: SortOrder) -> str:
    """`_single_upsert` for many submissions to SET or BEST boards of one kind, as arrays:
    $1 boards, $2 periods, $3 users, $4 scores, $5 reached ids; $6 now."""
    if operator is ScoreOperator.INCREMENT:
        raise ValueError("INCREMENT boards record one submission per statement")
    changed = _replaces(operator, order)
    return f"""
INSERT INTO leaderboard_scores AS s (leaderboard_id, period, user_id, score, reached_id, version, updated_at)
SELECT r.board, r.period, r.user_id, r.score, r.reached, 1, $6
FROM unnest($1::bigint[], $2::varchar[], $3::bigint[], $4::float8[], $5::bigint[]) AS r(board, period, user_id, score, reached)
ORDER BY 1, 2, 3
ON CONFLICT (leaderboard_id, period, user_id) DO UPDATE
SET score = excluded.score, reached_id = excluded.reached_id, version = s.version + 1, updated_at = excluded.updated_at
WHERE {changed}
RETURNING leaderboard_id, period, user_id, score, reached_id, version
"""


@dataclass(frozen=True)
class ScoreRequest:
    board: Leaderboard
    period: str
    submission: Submission


class ScoreBatches:
    """Single submissions of one moment to SET and BEST boards, written by one statement per
    kind of board, so they share one commit (`StepWrites`); INCREMENT boards go one by one."""

    def __init__(self, writes: WritePool) -> None:
        self.writes = writes
        self._kinds: dict[tuple[ScoreOperator, SortOrder], StepWrites[ScoreRequest, ScoreRecord | None]] = {}

    async def record(self, request: ScoreRequest) -> ScoreRecord | None:
        board = request.board
        if board.score_operator is ScoreOperator.INCREMENT or _outside(board, request.submission.score):
            return await record_score(self.writes, board=board, period=request.period, submission=request.submission)
        kind = (board.score_operator, board.order)
        batch = self._kinds.get(kind)
        if batch is None:
            batch = self._kinds[kind] = StepWrites(functools.partial(self._run, kind))
        return await batch.ask(request)

    async def _run(
        self, kind: tuple[ScoreOperator, SortOrder], items: list[ScoreRequest]
    ) -> list[ScoreRecord | Exception | None]:
        results: list[ScoreRecord | Exception | None] = [None] * len(items)
        now = utcnow()
        rounds = rounds_without_repeats(items, lambda r: (r.board.id, r.period, r.submission.user_id))
        for round_ in rounds:
            requests = [items[at] for at in round_]
            try:
                rows = await self.writes.fetch(
                    _many_upsert(*kind),
                    [r.board.id for r in requests],
                    [r.period for r in requests],
                    [r.submission.user_id for r in requests],
                    [r.submission.score for r in requests],
                    [r.submission.reached_id for r in requests],
                    now,
                )
            except (asyncpg.ForeignKeyViolationError, asyncpg.DeadlockDetectedError):
                # A submission names no user (or a lock cycle with another batch): each alone.
                for at, request in zip(round_, requests, strict=True):
                    try:
                        results[at] = await record_score(
                            self.writes, board=request.board, period=request.period, submission=request.submission
                        )
                    except Exception as error:
                        results[at] = error
                continue
            changed = {(row[0], row[1], row[2]): ScoreRecord(*row[2:]) for row in rows}
            for at, request in zip(round_, requests, strict=True):
                results[at] = changed.get((request.board.id, request.period, request.submission.user_id))
        return results


# The process's score batches on a pool.
score_batches = PerPool(ScoreBatches)


def takes_one_statement(board: Leaderboard, score: float) -> bool:
    """Whether `record_score` may record this submission (else `record_scores`)."""
    return not _outside(board, score)


@dataclass(frozen=True)
class Submission:
    user_id: int
    score: float
    reached_id: int


async def record_scores(
    session: AsyncSession, *, board: Leaderboard, period: str, submissions: Sequence[Submission]
) -> list[ScoreRecord]:
    """Apply submissions in order under the board's operator; the records they changed.

    The row lock each upsert takes serialises concurrent submissions for one user, so BEST
    and INCREMENT never lose an update. Submissions go in rounds of distinct users (one
    statement may touch a row once); an INCREMENT leaving the range raises OutOfBounds.
    """
    operator, now = board.score_operator, utcnow()
    incremented = operator is ScoreOperator.INCREMENT
    changed: list[ScoreRecord] = []
    for positions in rounds_without_repeats(submissions, lambda submission: submission.user_id):
        round_ = [submissions[at] for at in positions]
        # A step larger than the whole range may move an existing total but never start one.
        usual = [_params(board, period, now, s) for s in round_ if not _outside(board, s.score)]
        rows: list[Any] = list((await session.execute(_upsert(operator, board.order), usual)).all()) if usual else []
        for large in (s for s in round_ if _outside(board, s.score)):
            rows += (await session.execute(_move_total(), _params(board, period, now, large))).all()
        records = [ScoreRecord(*row) for row in rows]
        applied = {record.user_id for record in records}
        for submission in round_:
            if incremented and submission.score != 0 and submission.user_id not in applied:
                raise OutOfBounds(submission.user_id)
        changed += records
    return changed


def _params(board: Leaderboard, period: str, now: datetime, submission: Submission) -> dict[str, Any]:
    return {
        "new_board_id": board.id,
        "new_period": period,
        "new_user_id": submission.user_id,
        "new_score": submission.score,
        "new_reached_id": submission.reached_id,
        "new_now": now,
        "new_min_score": board.min_score,
        "new_max_score": board.max_score,
    }


def _outside(board: Leaderboard, score: float) -> bool:
    return board.score_operator is ScoreOperator.INCREMENT and not board.min_score <= score <= board.max_score


def _returned(table: Any) -> tuple[Any, ...]:
    return (table.c.user_id, table.c.score, table.c.reached_id, table.c.version)


async def score_records(
    session: AsyncSession, *, board_id: int, period: str, chunk: int
) -> AsyncIterator[list[ScoreRecord]]:
    """Every record of a board's period, streamed in chunks (a board may hold millions)."""
    statement = (
        select(
            col(LeaderboardScore.user_id),
            col(LeaderboardScore.score),
            col(LeaderboardScore.reached_id),
            col(LeaderboardScore.version),
        )
        .where(col(LeaderboardScore.leaderboard_id) == board_id, col(LeaderboardScore.period) == period)
        .execution_options(yield_per=chunk)
    )
    result = await session.stream(statement)
    async for partition in result.partitions(chunk):
        yield [ScoreRecord(*row) for row in partition]


class RepartitionState(Enum):
    # Readers use the old layout; writers keep both while the new one is copied from PostgreSQL.
    COPYING = "COPYING"
    # Readers use the new layout; writers still keep the old one for processes yet to notice.
    SWITCHED = "SWITCHED"
    DONE = "DONE"


class LeaderboardRepartition(MainTable, table=True):
    """One re-partitioning of a board: to which bounds, how far, and who is moving it now."""

    __tablename__ = "leaderboard_repartitions"

    leaderboard_id: int = Field(
        sa_column=Column(BigInteger, ForeignKey("leaderboards.id", ondelete="CASCADE"), primary_key=True)
    )
    # The layout generation it moves to.
    generation: int = Field(sa_column=Column(Integer, primary_key=True))
    partition_bounds: list[float] = Field(sa_column=Column(ARRAY(Double), nullable=False))
    previous_bounds: list[float] = Field(sa_column=Column(ARRAY(Double), nullable=False))
    state: str = Field(sa_column=Column(String(16), nullable=False))
    moved_entries: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
    total_entries: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
    started_at: datetime = timestamp()  # type: ignore[assignment]
    updated_at: datetime = timestamp()  # type: ignore[assignment]
    finished_at: datetime | None = Field(default=None, sa_column=Column(DateTime(timezone=True), nullable=True))
    # The mover renews this while it works; once it lapses (the mover died) any worker resumes.
    lease_until: datetime = timestamp()  # type: ignore[assignment]

    @property
    def phase(self) -> RepartitionState:
        return RepartitionState(self.state)


# Every statement below runs in a session of the caller's (`resolvers/leaderboards/repartition.py`).

START_REPARTITION = text(
    """
UPDATE leaderboards SET shadow_bounds = :bounds, shadow_generation = layout_generation + 1
WHERE id = :board_id AND shadow_generation IS NULL
RETURNING layout_generation + 1 AS generation, partition_bounds AS previous_bounds
"""
)

CLAIM_REPARTITION = text(
    """
UPDATE leaderboard_repartitions SET lease_until = now() + make_interval(secs => :seconds)
WHERE (leaderboard_id, generation) = (
    SELECT leaderboard_id, generation FROM leaderboard_repartitions
    WHERE state <> 'DONE' AND lease_until <= now()
      AND (CAST(:board_id AS bigint) IS NULL OR leaderboard_id = :board_id)
    ORDER BY lease_until LIMIT 1 FOR UPDATE SKIP LOCKED
)
RETURNING leaderboard_id, generation
"""
)

# Readers switch to the new layout; writers keep the old one as the shadow.
SWITCH_LAYOUT = text(
    """
UPDATE leaderboards
SET partition_bounds = shadow_bounds, layout_generation = shadow_generation,
    shadow_bounds = partition_bounds, shadow_generation = layout_generation
WHERE id = :board_id AND shadow_generation = :generation
"""
)

DROP_SHADOW = text(
    """
UPDATE leaderboards SET shadow_bounds = NULL, shadow_generation = NULL
WHERE id = :board_id AND layout_generation = :generation
"""
)

PERIOD_SIZES = text(
    "SELECT period, count(*) FROM leaderboard_scores WHERE leaderboard_id = :board_id GROUP BY period ORDER BY period"
)


# The newest re-partitioning of each board in $1 (the read path's loader).
LATEST_REPARTITIONS = """
SELECT DISTINCT ON (leaderboard_id) * FROM leaderboard_repartitions
WHERE leaderboard_id = ANY($1::bigint[]) ORDER BY leaderboard_id, generation DESC
"""

# Re-partitionings by (board $1[i], generation $2[i]).
REPARTITIONS_BY_KEY = """
SELECT r.* FROM leaderboard_repartitions r
JOIN unnest($1::bigint[], $2::int[]) AS k(leaderboard_id, generation) USING (leaderboard_id, generation)
"""

MARK_REPARTITION = text(
    """
UPDATE leaderboard_repartitions SET state = CAST(:to_state AS varchar), updated_at = now(),
    finished_at = CASE WHEN CAST(:to_state AS varchar) = 'DONE' THEN now() END
WHERE leaderboard_id = :board_id AND generation = :generation AND state = :from_state
"""
)

REPARTITION_PROGRESS = text(
    """
UPDATE leaderboard_repartitions SET moved_entries = :moved
WHERE leaderboard_id = :board_id AND generation = :generation
"""
)

REPARTITION_TOTAL = text(
    """
UPDATE leaderboard_repartitions SET total_entries = :total
WHERE leaderboard_id = :board_id AND generation = :generation
"""
)

RENEW_LEASE = text(
    """
UPDATE leaderboard_repartitions SET lease_until = now() + make_interval(secs => :seconds)
WHERE leaderboard_id = :board_id AND generation = :generation AND state <> 'DONE'
"""
)

# Seconds until `updated_at` (the last change of state) is `:seconds` in the past.
SECONDS_UNTIL_SETTLED = text(
    """
SELECT greatest(0, extract(epoch FROM updated_at + make_interval(secs => :seconds) - now()))
FROM leaderboard_repartitions WHERE leaderboard_id = :board_id AND generation = :generation
"""
)

UNFINISHED_REPARTITIONS = text(
    """
SELECT coalesce(sum(greatest(total_entries - moved_entries, 0)), 0), extract(epoch FROM now() - min(started_at))
FROM leaderboard_repartitions WHERE state <> 'DONE'
"""
)
