"""Leaderboard definitions and the durable score record every Redis board is rebuilt from.

A definition never changes once created (everything in it decides how stored scores
are combined, ordered or laid out), so processes may cache it for their lifetime.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from sqlalchemy import BigInteger, Column, Double, ForeignKey, Index, String, false, select, update
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import Field, col

from mediagraph.db.base import MainTable, snowflake_key, timestamp, utcnow

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
    partition_bounds: list[float] = Field(default_factory=list, sa_column=Column(ARRAY(Double), nullable=False))
    min_score: float = Field(sa_column=Column(Double, nullable=False))
    max_score: float = Field(sa_column=Column(Double, nullable=False))
    created_at: datetime = timestamp()  # type: ignore[assignment]

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
    """An INCREMENT would take the running total outside the board's range."""


def _changed_when(board: Leaderboard, current: object, submitted: object) -> object:
    operator = board.score_operator
    if operator is ScoreOperator.SET:
        return submitted != current
    if board.order is SortOrder.DESC:
        return submitted > current  # type: ignore[operator]
    return submitted < current  # type: ignore[operator]


async def record_score(
    session: AsyncSession, *, board: Leaderboard, period: str, user_id: int, score: float, reached_id: int
) -> ScoreRecord | None:
    """Apply one submission under the board's operator; the new record, or None when nothing changed.

    One statement: the row lock taken by the upsert serialises concurrent submissions for
    the same user, so BEST and INCREMENT never lose an update.
    """
    table = LeaderboardScore.__table__  # type: ignore[attr-defined]
    now = utcnow()
    bump = {"reached_id": reached_id, "version": table.c.version + 1, "updated_at": now}
    if board.score_operator is ScoreOperator.INCREMENT:
        total = table.c.score + score
        in_bounds = total.between(board.min_score, board.max_score)
        if not board.min_score <= score <= board.max_score:
            # A first submission would start outside the range: only an existing total may move.
            moved = (
                update(table)
                .where(
                    table.c.leaderboard_id == board.id,
                    table.c.period == period,
                    table.c.user_id == user_id,
                    in_bounds,
                )
                .values(score=total, **bump)
                .returning(*_returned(table))
            )
            row = (await session.execute(moved)).first()
            if row is None:
                raise OutOfBounds
            return ScoreRecord(*row)
        values = {"score": total, **bump}
        # Adding zero changes nothing, and must not refresh when the total was reached.
        condition = in_bounds if score != 0 else false()
    else:
        excluded = insert(table).excluded
        values = {**bump, "score": excluded.score, "reached_id": excluded.reached_id}
        condition = _changed_when(board, table.c.score, excluded.score)
    statement = (
        insert(table)
        .values(
            leaderboard_id=board.id,
            period=period,
            user_id=user_id,
            score=score,
            reached_id=reached_id,
            version=1,
            updated_at=now,
        )
        .on_conflict_do_update(index_elements=["leaderboard_id", "period", "user_id"], set_=values, where=condition)
        .returning(*_returned(table))
    )
    row = (await session.execute(statement)).first()
    if row is None and board.score_operator is ScoreOperator.INCREMENT and score != 0:
        raise OutOfBounds
    return ScoreRecord(*row) if row is not None else None


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
