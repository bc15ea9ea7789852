"""Leaderboard definitions: created by trusted callers, immutable once created, listed by name."""

from __future__ import annotations

import itertools
import math
import re

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from mediagraph.context import Context
from mediagraph.cursors import decode_cursor, encode_cursor
from mediagraph.dataloaders.leaderboards import (
    LatestRepartitionByBoardLoader,
    LeaderboardByIdLoader,
    LeaderboardByNameLoader,
    RepartitionByKeyLoader,
    forget,
    remember,
)
from mediagraph.db.leaderboards import (
    MAX_EXACT_SCORE,
    Leaderboard,
    LeaderboardRepartition,
    Period,
    ScoreOperator,
    SortOrder,
)
from mediagraph.errors import BadUserInput, Conflict, NotFound
from mediagraph.resolvers.leaderboards import repartition
from mediagraph.resolvers.pagination import Page, PageRequest, keyset_page

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


def finite(value: float, argument: str) -> float:
    if not math.isfinite(value) or abs(value) > MAX_EXACT_SCORE:
        raise BadUserInput(f"`{argument}` must be a finite number within ±(2^53 − 1).", argument=argument)
    return float(value)


def checked_bounds(partition_bounds: list[float], *, low: float, high: float) -> list[float]:
    bounds = [finite(bound, "partitionBounds") for bound in partition_bounds]
    if len(bounds) >= MAX_PARTITIONS:
        raise BadUserInput(f"At most {MAX_PARTITIONS - 1} partition bounds.", argument="partitionBounds")
    if any(b <= a for a, b in itertools.pairwise(bounds)) or any(not low < b <= high for b in bounds):
        raise BadUserInput(
            "`partitionBounds` must increase strictly and lie inside (minScore, maxScore].",
            argument="partitionBounds",
        )
    return bounds


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
    low = finite(min_score if min_score is not None else -MAX_EXACT_SCORE, "minScore")
    high = finite(max_score if max_score is not None else MAX_EXACT_SCORE, "maxScore")
    if low >= high:
        raise BadUserInput("`minScore` must be below `maxScore`.", argument="minScore")
    bounds = checked_bounds(partition_bounds, low=low, high=high)
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
        remedy = (
            "move its partitions with `repartitionLeaderboard`"
            if differing == ["partition_bounds"]
            else "define a new leaderboard under another name"
        )
        raise Conflict(
            f"Leaderboard {existing.name!r} already exists with a different {names}. A definition cannot "
            f"change once scores may depend on it; {remedy}.",
            argument="name",
            fields=[_camel(field) for field in differing],
        )


async def repartition_leaderboard(context: Context, *, name: str, partition_bounds: list[float]) -> Leaderboard:
    """Start moving a board to new partition bounds while it keeps taking scores; a worker carries the
    move through (`repartition.py`) and the definition's `repartition` shows how far it is."""
    context.require_service()
    definition = await require_definition(context, name)
    bounds = checked_bounds(partition_bounds, low=definition.min_score, high=definition.max_score)
    try:
        async with context.db.use() as session:
            await repartition.start(session, definition, bounds)
    except repartition.RepartitionRefused as error:
        raise Conflict(
            f"Leaderboard {definition.name!r} is being re-partitioned into {error.moving_to} already; "
            "ask again once that move is done.",
            argument="partitionBounds",
        ) from None
    context.loader(LeaderboardByNameLoader).clear(definition.name)
    forget(context.services.endpoints.database_url, definition.name)
    return await require_definition(context, definition.name)


def _camel(field: str) -> str:
    head, *rest = field.split("_")
    return head + "".join(part.title() for part in rest)


async def latest_repartition(context: Context, board_id: int) -> LeaderboardRepartition | None:
    return await context.loader(LatestRepartitionByBoardLoader).load(board_id)


async def repartition_by_key(context: Context, board_id: int, generation: int) -> LeaderboardRepartition | None:
    return await context.loader(RepartitionByKeyLoader).load((board_id, generation))


async def leaderboards(context: Context, *, request: PageRequest) -> Page[Leaderboard]:
    """Definitions by name, both ways."""
    secret = context.settings.secret_key
    query = select(Leaderboard)
    if request.cursor is not None:
        argument = "before" if request.backward else "after"
        values = decode_cursor(secret, "leaderboards", request.cursor)
        if len(values) != 1 or not isinstance(values[0], str):
            raise BadUserInput(f"The cursor is invalid; start again without `{argument}`.", argument=argument)
        name = col(Leaderboard.name)
        query = query.where(name < values[0] if request.backward else name > values[0])
    order = col(Leaderboard.name).desc() if request.backward else col(Leaderboard.name)
    async with context.db.use() as session:
        rows = list((await session.execute(query.order_by(order).limit(request.size + 1))).scalars())
    return keyset_page(request, rows, lambda row: encode_cursor(secret, "leaderboards", [row.name]))
