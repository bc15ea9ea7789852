"""Leaderboards: definitions, trusted score submission, and ranked reads of a period."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from mediagraph.context import Context
from mediagraph.cursors import decode_cursor, encode_cursor
from mediagraph.dataloaders.leaderboards import LeaderboardByIdLoader, LeaderboardByNameLoader, remember
from mediagraph.db.base import utcnow
from mediagraph.db.leaderboards import (
    MAX_EXACT_SCORE,
    Leaderboard,
    OutOfBounds,
    Period,
    ScoreOperator,
    SortOrder,
    record_score,
)
from mediagraph.errors import BadUserInput, Conflict, NotFound
from mediagraph.resolvers import leaderboard_store as store
from mediagraph.resolvers.leaderboard_periods import current_window, parse_window
from mediagraph.resolvers.leaderboard_store import Board, RankedEntry
from mediagraph.resolvers.pagination import Page
from mediagraph.schema.relay import page_size
from mediagraph.services import Services
from mediagraph.subscriptions.leaderboards import EntryState, TopState, Watch, tickers

NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
MAX_PARTITIONS = 32
MAX_RADIUS = 50
DEFINITION_FIELDS = ("sort_order", "operator", "period", "partition_bounds", "min_score", "max_score")


def clean_name(value: str, *, argument: str = "name") -> str:
    name = value.strip().lower()
    if not NAME.fullmatch(name):
        raise BadUserInput(
            f"`{argument}` must be 1 to 64 characters: lower-case letters, digits, '_', '-' or '.'.",
            argument=argument,
        )
    return name


def _finite(value: float, argument: str) -> float:
    if not math.isfinite(value) or abs(value) > MAX_EXACT_SCORE:
        raise BadUserInput(f"`{argument}` must be a finite number within ±(2^53 − 1).", argument=argument)
    return float(value)


async def definition_by_name(context: Context, name: str) -> Leaderboard | None:
    if not NAME.fullmatch(name.strip().lower()):
        return None
    return await context.loader(LeaderboardByNameLoader).load(name.strip().lower())


async def definition_by_id(context: Context, board_id: int) -> Leaderboard | None:
    return await context.loader(LeaderboardByIdLoader).load(board_id)


async def require_definition(context: Context, name: str, *, argument: str = "name") -> Leaderboard:
    definition = await definition_by_name(context, name)
    if definition is None:
        raise NotFound(f"No leaderboard named {name[:64]!r}.", argument=argument)
    return definition


async def define_leaderboard(
    context: Context,
    *,
    name: str,
    sort_order: SortOrder,
    operator: ScoreOperator,
    period: Period,
    partition_bounds: list[float],
    min_score: float | None,
    max_score: float | None,
) -> Leaderboard:
    context.require_service()
    low = _finite(min_score if min_score is not None else -MAX_EXACT_SCORE, "minScore")
    high = _finite(max_score if max_score is not None else MAX_EXACT_SCORE, "maxScore")
    if low >= high:
        raise BadUserInput("`minScore` must be below `maxScore`.", argument="minScore")
    bounds = [_finite(bound, "partitionBounds") for bound in partition_bounds]
    if len(bounds) >= MAX_PARTITIONS:
        raise BadUserInput(f"At most {MAX_PARTITIONS - 1} partition bounds.", argument="partitionBounds")
    if any(b <= a for a, b in itertools.pairwise(bounds)) or any(not low < b <= high for b in bounds):
        raise BadUserInput(
            "`partitionBounds` must increase strictly and lie inside (minScore, maxScore].",
            argument="partitionBounds",
        )
    wanted = Leaderboard(
        id=context.services.ids.next_id(),
        name=clean_name(name),
        sort_order=sort_order.value,
        operator=operator.value,
        period=period.value,
        partition_bounds=bounds,
        min_score=low,
        max_score=high,
    )
    existing = await definition_by_name(context, wanted.name)
    if existing is None:
        try:
            async with context.db.use() as session:
                session.add(wanted)
                await session.commit()
            existing = wanted
        except IntegrityError:
            # Defined concurrently under the same name: compare with the winner.
            context.loader(LeaderboardByNameLoader).clear(wanted.name)
            existing = await require_definition(context, wanted.name)
    _refuse_changes(existing, wanted)
    remember(context.services.endpoints.database_url, existing)
    return existing


def _refuse_changes(existing: Leaderboard, wanted: Leaderboard) -> None:
    differing = [field for field in DEFINITION_FIELDS if getattr(existing, field) != getattr(wanted, field)]
    if differing:
        names = ", ".join(_camel(field) for field in differing)
        raise Conflict(
            f"Leaderboard {existing.name!r} already exists with a different {names}. A definition cannot "
            "change once scores may depend on it; define a new leaderboard under another name.",
            argument="name",
            fields=[_camel(field) for field in differing],
        )


def _camel(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(part.title() for part in rest)


async def leaderboards(context: Context, *, first: int | None, after: str | None) -> Page[Leaderboard]:
    limit = page_size(first, context.settings.max_page_size)
    query = select(Leaderboard).order_by(col(Leaderboard.name)).limit(limit + 1)
    if after is not None:
        values = decode_cursor(context.settings.secret_key, "leaderboards", after)
        if len(values) != 1 or not isinstance(values[0], str):
            raise BadUserInput("The cursor is invalid; start again without `after`.")
        query = query.where(col(Leaderboard.name) > values[0])
    async with context.db.use() as session:
        rows = list((await session.execute(query)).scalars())
    return Page(
        items=[(encode_cursor(context.settings.secret_key, "leaderboards", [row.name]), row) for row in rows[:limit]],
        has_next_page=len(rows) > limit,
    )


def current_board(services: Services, definition: Leaderboard) -> Board:
    now = utcnow()
    return Board.of(services, definition, current_window(definition.period_kind, now), now=now)


async def leaderboard(context: Context, *, name: str, period: str | None) -> Board | None:
    definition = await definition_by_name(context, name)
    if definition is None:
        return None
    if period is None:
        return current_board(context.services, definition)
    window = parse_window(definition.period_kind, period)
    return Board.of(context.services, definition, window, now=utcnow())


def checked_score(definition: Leaderboard, score: float) -> float:
    value = _finite(score, "score")
    if definition.score_operator is not ScoreOperator.INCREMENT and not (
        definition.min_score <= value <= definition.max_score
    ):
        raise BadUserInput(
            f"`score` must be between {definition.min_score:g} and {definition.max_score:g} on this leaderboard.",
            argument="score",
        )
    return value


@dataclass(frozen=True)
class Submission:
    board: Board
    user_id: int
    changed: bool


async def submit_score(context: Context, *, leaderboard: str, user_id: int, score: float) -> Submission:
    context.require_service()
    definition = await require_definition(context, leaderboard, argument="leaderboard")
    value = checked_score(definition, score)
    services = context.services
    board = current_board(services, definition)
    try:
        async with context.db.use() as session:
            record = await record_score(
                session,
                board=definition,
                period=board.window.key,
                user_id=user_id,
                score=value,
                reached_id=services.ids.next_id(),
            )
            await session.commit()
    except IntegrityError:
        raise NotFound("No such user.", argument="userId") from None
    except OutOfBounds:
        raise BadUserInput(
            f"The running total must stay between {definition.min_score:g} and {definition.max_score:g}.",
            argument="score",
        ) from None
    if record is not None:
        try:
            await store.apply(services, board, [record], announce=True)
        except (RedisError, OSError):
            # The score is recorded: answer success (a retry would count an INCREMENT twice)
            # and let the board catch up once Redis answers again.
            store.repairs.add(services, board, [record])
    return Submission(board=board, user_id=user_id, changed=record is not None)


def _top_cursor(context: Context, board: Board, entry: RankedEntry) -> str:
    values: list[Any] = [
        entry.rank - 1,
        store.member_of(entry),
        board.partition(entry.score),
        board.stored(entry.score),
    ]
    return encode_cursor(context.settings.secret_key, _top_kind(board), values)


def _top_kind(board: Board) -> str:
    return f"leaderboard:{board.definition.id}:{board.window.key}"


def _after(context: Context, board: Board, after: str) -> tuple[int, tuple[str, int, float]]:
    values = decode_cursor(context.settings.secret_key, _top_kind(board), after)
    match values:
        case [int(position), str(member), int(partition), int() | float() as stored]:
            return position + 1, (member, partition, float(stored))
    raise BadUserInput("The cursor is invalid; start again without `after`.")


async def top(context: Context, board: Board, *, first: int | None, after: str | None) -> tuple[Page[RankedEntry], int]:
    """Entries in rank order. A page resumes right after its last entry while that entry keeps its
    score, and at the same position otherwise (entries moving meanwhile may then repeat or be missed)."""
    limit = page_size(first, context.settings.max_page_size)
    start, anchor = _after(context, board, after) if after is not None else (0, None)
    redis = context.services.redis
    found = await store.loaded(
        context.services, board, lambda: store.read_range(redis, board, start=start, count=limit, after=anchor)
    )
    page = Page(
        items=[(_top_cursor(context, board, entry), entry) for entry in found.entries],
        has_next_page=found.start + len(found.entries) < found.total,
    )
    return page, found.total


async def entry(context: Context, board: Board, *, user_id: int) -> RankedEntry | None:
    redis = context.services.redis
    _, found = await store.loaded(context.services, board, lambda: store.read_entries(redis, board, [user_id]))
    return found[0]


async def around(context: Context, board: Board, *, user_id: int, radius: int) -> list[RankedEntry]:
    if not 0 <= radius <= MAX_RADIUS:
        raise BadUserInput(f"`radius` must be between 0 and {MAX_RADIUS}.", argument="radius")
    redis = context.services.redis
    found = await store.loaded(
        context.services, board, lambda: store.read_around(redis, board, user_id=user_id, radius=radius)
    )
    return found.entries


async def size(context: Context, board: Board) -> int:
    redis = context.services.redis
    total, _ = await store.loaded(context.services, board, lambda: store.read_entries(redis, board, []))
    return total


async def watch_top(context: Context, *, name: str, first: int | None) -> AsyncIterator[TopState]:
    limit = page_size(first, context.settings.max_page_size)
    definition = await require_definition(context, name)
    async with tickers.watch(context.services, definition, Watch(first=limit)) as watch:
        async for state in watch.states():
            yield state


async def watch_entry(context: Context, *, name: str, user_id: int) -> AsyncIterator[EntryState]:
    definition = await require_definition(context, name)
    async with tickers.watch(context.services, definition, Watch(user_id=user_id)) as watch:
        async for state in watch.states():
            yield state
