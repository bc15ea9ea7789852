"""Leaderboards: trusted score submission and ranked reads of one period of a board."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError
from sqlalchemy.exc import IntegrityError

from mediagraph.context import Context
from mediagraph.cursors import decode_cursor, encode_cursor
from mediagraph.dataloaders.leaderboards import current_definition
from mediagraph.db.base import utcnow
from mediagraph.db.leaderboards import (
    Leaderboard,
    MissingUser,
    OutOfBounds,
    ScoreOperator,
    ScoreRequest,
    Submission,
    record_scores,
    score_batches,
    takes_one_statement,
)
from mediagraph.errors import BadUserInput, NotFound
from mediagraph.ids import to_global_id
from mediagraph.resolvers.leaderboards import store
from mediagraph.resolvers.leaderboards.definitions import (
    definition_by_id,
    definition_by_name,
    finite,
    require_definition,
)
from mediagraph.resolvers.leaderboards.live import EntryState, TopState, Watch, tickers
from mediagraph.resolvers.leaderboards.periods import current_window, parse_window, window_of_code
from mediagraph.resolvers.leaderboards.repairs import repairs
from mediagraph.resolvers.leaderboards.store import Board, RankedEntry
from mediagraph.resolvers.pagination import Page, PageRequest, page_size
from mediagraph.services import Services

MAX_RADIUS = 50


def current_board(services: Services, definition: Leaderboard) -> Board:
    now = utcnow()
    return Board.of(services, definition, current_window(definition.period_kind, now), now=now)


async def leaderboard(context: Context, *, name: str, period: str | None) -> Board | None:
    definition = await definition_by_name(context, name)
    if definition is None:
        return None
    if period is None:
        return current_board(context.services, definition)
    window, now = parse_window(definition.period_kind, period), utcnow()
    if window.starts_at is not None and window.starts_at > now:
        raise BadUserInput(f"The period {window.key} has not started yet.", argument="period")
    return Board.of(context.services, definition, window, now=now)


async def board_by_code(context: Context, *, definition_id: int, period_code: int) -> Board | None:
    """The period a global id names (`periods.window_code`), or None when there is no such board or
    period, or the period has not started yet."""
    definition = await definition_by_id(context, definition_id)
    if definition is None:
        return None
    window, now = window_of_code(definition.period_kind, period_code), utcnow()
    if window is None or (window.starts_at is not None and window.starts_at > now):
        return None
    return Board.of(context.services, definition, window, now=now)


def checked_score(definition: Leaderboard, score: float, *, argument: str = "score") -> float:
    value = finite(score, argument)
    if definition.score_operator is not ScoreOperator.INCREMENT and not (
        definition.min_score <= value <= definition.max_score
    ):
        raise BadUserInput(
            f"`{argument}` must be between {definition.min_score:g} and {definition.max_score:g} on this leaderboard.",
            argument=argument,
        )
    return value


@dataclass(frozen=True)
class Accepted:
    """Submissions recorded for the current period of a board."""

    board: Board
    user_ids: list[int]  # each submitting user once, in order
    changed: int  # how many submissions changed a stored score


async def submit_scores(context: Context, *, leaderboard: str, scores: Sequence[tuple[int, float]]) -> Accepted:
    """Record submissions, all or none: one invalid submission refuses the whole batch."""
    context.require_service()
    limit = context.settings.max_page_size
    if not 1 <= len(scores) <= limit:
        raise BadUserInput(f"Submit 1 to {limit} scores at once.", argument="scores")
    definition = await require_definition(context, leaderboard, argument="leaderboard")
    single = len(scores) == 1
    services = context.services
    values = [
        checked_score(definition, score, argument="score" if single else f"scores[{n}].score")
        for n, (_, score) in enumerate(scores)
    ]
    submissions = [
        Submission(user_id, value, services.ids.next_id()) for (user_id, _), value in zip(scores, values, strict=True)
    ]
    window = current_window(definition.period_kind, utcnow())
    try:
        if single and takes_one_statement(definition, submissions[0].score):
            # The hot path: one prepared statement, no session (db/__init__.py).
            # Written with the other single submissions of this moment: one statement, one commit.
            record = await score_batches(services.databases.main_writes).record(
                ScoreRequest(board=definition, period=window.key, submission=submissions[0])
            )
            records = [record] if record is not None else []
        else:
            async with context.db.use() as session:
                records = await record_scores(session, board=definition, period=window.key, submissions=submissions)
                await session.commit()
    except (IntegrityError, MissingUser):
        raise NotFound(
            "No such user." if single else "A submission names no existing user.", argument="userId"
        ) from None
    except OutOfBounds as error:
        raise BadUserInput(
            f"The running total of user {to_global_id('User', error.user_id)} must stay between "
            f"{definition.min_score:g} and {definition.max_score:g}.",
            argument="score",
        ) from None
    # The layouts to write are resolved after the commit: a re-partitioning that began meanwhile
    # is then seen (repartition.py), so it either copies these records or gets them here.
    board = Board.of(services, await current_definition(services, definition), window, now=utcnow())
    if records:
        try:
            await store.apply(services, board, records, announce=True)
        except (RedisError, OSError):
            # The scores are recorded: answer success (a retry would count an INCREMENT twice)
            # and let the board catch up once Redis answers again.
            repairs.add(services, board, records)
    return Accepted(board=board, user_ids=list(dict.fromkeys(user_id for user_id, _ in scores)), changed=len(records))


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


def _anchor(context: Context, board: Board, cursor: str, argument: str) -> tuple[int, tuple[str, int, float]]:
    values = decode_cursor(context.settings.secret_key, _top_kind(board), cursor)
    match values:
        case [int(position), str(member), int(), int() | float() as stored]:
            # The partition is found again from the score: a re-partitioning may have moved it.
            return position, (member, board.partition(board.shown(float(stored))), float(stored))
    raise BadUserInput(f"The cursor is invalid; start again without `{argument}`.", argument=argument)


async def top(context: Context, board: Board, *, request: PageRequest) -> tuple[Page[RankedEntry], int]:
    """Entries in rank order, both ways. A page resumes next to its cursor's entry while that entry keeps
    its score, and at the cursor's position otherwise (entries moving meanwhile may then repeat or be missed)."""
    anchor: tuple[str, int, float] | None = None
    if request.cursor is None:
        # Forward from the top; backward from the bottom.
        start = -1 if request.backward else 0
    else:
        position, anchor = _anchor(context, board, request.cursor, "before" if request.backward else "after")
        start = position if request.backward else position + 1
    redis = context.services.redis
    found = await store.loaded(
        context.services,
        board,
        lambda: store.read_range(
            redis, board, start=start, count=request.size, after=anchor, backward=request.backward
        ),
    )
    after_last = found.start + len(found.entries)
    page = Page(
        items=[(_top_cursor(context, board, entry), entry) for entry in found.entries],
        has_next_page=after_last < found.total,
        has_previous_page=found.start > 0,
    )
    return page, found.total


async def entry(context: Context, board: Board, *, user_id: int) -> RankedEntry | None:
    return (await entries(context, board, user_ids=[user_id]))[0]


async def entries(context: Context, board: Board, *, user_ids: Sequence[int]) -> list[RankedEntry | None]:
    """Several users' standings in one round trip."""
    redis = context.services.redis
    _, found = await store.loaded(context.services, board, lambda: store.read_entries(redis, board, user_ids))
    return found


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
