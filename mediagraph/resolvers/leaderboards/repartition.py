"""Re-partitioning a live board: its periods laid out again under new score bounds while
scores keep arriving, with exact ranks throughout (the design's online re-partitioning).

A board's definition names the layout readers use and, during a move, a shadow layout
that writers keep as well (`Board.layouts`). Every process re-reads definitions at least
every `leaderboard_definition_refresh_seconds`, and a score's writer resolves the layout
after its commit, so waiting `leaderboard_repartition_grace_seconds` (longer) after a step
means every process follows it:

1. COPYING: the new layout is the shadow; readers stay on the old one. After the grace,
   each period loaded in Redis is rebuilt into the new layout from PostgreSQL (the
   rebuild's own argument holds: a score committed meanwhile is either read or applied to
   both layouts by its writer; versions settle the order).
2. SWITCHED: readers move to the new layout; writers keep the old one as the shadow, for
   processes that still read it. After the grace the shadow is dropped.
3. After another grace no process writes the old layout: its keys are deleted and the
   move is DONE.

The state, the progress and a lease live in `leaderboard_repartitions`. Every step is
idempotent and guarded by the state it leaves, so a worker resumes a move whose mover
died (its lease lapsed) from where the state says, and two movers never conflict.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from sqlalchemy import TextClause, select
from sqlalchemy.ext.asyncio import AsyncSession

from mediagraph.db.base import utcnow
from mediagraph.db.leaderboards import (
    CLAIM_REPARTITION,
    DROP_SHADOW,
    MARK_REPARTITION,
    PERIOD_SIZES,
    RENEW_LEASE,
    REPARTITION_PROGRESS,
    REPARTITION_TOTAL,
    SECONDS_UNTIL_SETTLED,
    START_REPARTITION,
    SWITCH_LAYOUT,
    UNFINISHED_REPARTITIONS,
    Leaderboard,
    LeaderboardRepartition,
    RepartitionState,
)
from mediagraph.keys.leaderboards import board_keys
from mediagraph.resolvers.leaderboards import store
from mediagraph.resolvers.leaderboards.periods import parse_window
from mediagraph.services import Services

log = logging.getLogger(__name__)


class RepartitionRefused(Exception):
    """Another re-partitioning of the board, to other bounds, is under way."""

    def __init__(self, moving_to: list[float]) -> None:
        super().__init__(moving_to)
        self.moving_to = moving_to


async def start(session: AsyncSession, definition: Leaderboard, bounds: list[float]) -> LeaderboardRepartition | None:
    """Begin moving the board to `bounds` (checked by the caller); None when it already has them.

    Asking again for the move under way is answered with it; asking for other bounds while
    one is under way raises RepartitionRefused. Commits.
    """
    current = await session.get(Leaderboard, definition.id, populate_existing=True, with_for_update=True)
    if current is None:
        raise LookupError(definition.id)
    if current.shadow_generation is not None:
        under_way = await _latest(session, current.id)
        if under_way is not None and list(under_way.partition_bounds) == bounds:
            await session.commit()
            return under_way
        raise RepartitionRefused(list(under_way.partition_bounds) if under_way is not None else [])
    if list(current.partition_bounds) == bounds:
        await session.commit()
        return None
    started = (await session.execute(START_REPARTITION, {"board_id": current.id, "bounds": bounds})).one()
    now = utcnow()
    repartition = LeaderboardRepartition(
        leaderboard_id=current.id,
        generation=started.generation,
        partition_bounds=bounds,
        previous_bounds=list(started.previous_bounds),
        state=RepartitionState.COPYING.value,
        started_at=now,
        updated_at=now,
        lease_until=now,  # claimable at once
    )
    session.add(repartition)
    await session.commit()
    return repartition


async def _latest(session: AsyncSession, board_id: int) -> LeaderboardRepartition | None:
    query = (
        select(LeaderboardRepartition)
        .where(LeaderboardRepartition.leaderboard_id == board_id)  # type: ignore[arg-type]
        .order_by(LeaderboardRepartition.generation.desc())  # type: ignore[attr-defined]
        .limit(1)
    )
    return (await session.execute(query)).scalars().first()


async def latest(services: Services, board_id: int) -> LeaderboardRepartition | None:
    async with services.databases.main_session() as session:
        return await _latest(session, board_id)


async def carry_through(services: Services, board_id: int) -> None:
    """Until the board's newest move is DONE: moving it here, or waiting for the worker that has it."""
    while True:
        if await resume_one(services, board_id=board_id):
            continue
        newest = await latest(services, board_id)
        if newest is None or newest.phase is RepartitionState.DONE:
            return
        await asyncio.sleep(0.5)


async def resume_one(services: Services, *, board_id: int | None = None) -> bool:
    """Claim one unfinished move whose lease lapsed (of `board_id`, or any) and carry it to DONE;
    whether there was one."""
    lease = services.settings.leaderboard_repartition_lease_seconds
    async with services.databases.main_session() as session:
        claimed = (await session.execute(CLAIM_REPARTITION, {"seconds": lease, "board_id": board_id})).first()
        await session.commit()
    if claimed is None:
        return False
    await Move(services, claimed.leaderboard_id, claimed.generation).run()
    return True


@dataclass(frozen=True)
class Progress:
    entries_left: int
    oldest_seconds: float | None


async def progress(services: Services) -> Progress:
    """How much every unfinished move has left to copy (for the worker's lag)."""
    async with services.databases.main_session() as session:
        left, age = (await session.execute(UNFINISHED_REPARTITIONS)).one()
    return Progress(int(left), float(age) if age is not None else None)


class Move:
    """One claimed move, from whatever state it is in to DONE."""

    def __init__(self, services: Services, board_id: int, generation: int) -> None:
        self.services = services
        self.board_id = board_id
        self.generation = generation
        self.grace = services.settings.leaderboard_repartition_grace_seconds

    async def run(self) -> None:
        async with self._lease():
            state = await self._state()
            if state is RepartitionState.COPYING:
                await self._settle()
                await self._copy()
                await self._switch()
                state = RepartitionState.SWITCHED
            if state is RepartitionState.SWITCHED:
                await self._settle()
                await self._sql(DROP_SHADOW, board_id=self.board_id, generation=self.generation)
                await asyncio.sleep(self.grace)
                await self._drop_old_keys()
                await self._mark(RepartitionState.SWITCHED, RepartitionState.DONE)
                log.info("leaderboard %d: re-partitioned into layout %d", self.board_id, self.generation)

    @contextlib.asynccontextmanager
    async def _lease(self) -> AsyncIterator[None]:
        seconds = self.services.settings.leaderboard_repartition_lease_seconds

        async def renew() -> None:
            while True:
                await asyncio.sleep(seconds / 3)
                try:
                    await self._sql(RENEW_LEASE, board_id=self.board_id, generation=self.generation, seconds=seconds)
                except Exception as error:  # the next renewal tries again; a lapsed lease only lets a twin in
                    log.warning("leaderboard %d: cannot renew the move's lease: %s", self.board_id, error)

        renewing = asyncio.create_task(renew(), name=f"repartition-lease:{self.board_id}")
        try:
            yield
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing

    async def _sql(self, statement: TextClause, **params: object) -> None:
        async with self.services.databases.main_session() as session:
            await session.execute(statement, params)
            await session.commit()

    async def _state(self) -> RepartitionState:
        async with self.services.databases.main_session() as session:
            row = await session.get(LeaderboardRepartition, (self.board_id, self.generation))
            return row.phase if row is not None else RepartitionState.DONE

    async def _settle(self) -> None:
        """Until the last change of state is a grace period old: every process has followed it."""
        async with self.services.databases.main_session() as session:
            params = {"board_id": self.board_id, "generation": self.generation, "seconds": self.grace}
            wait = (await session.execute(SECONDS_UNTIL_SETTLED, params)).scalar_one()
        await asyncio.sleep(float(wait))

    async def _definition(self) -> Leaderboard:
        async with self.services.databases.main_session() as session:
            definition = await session.get(Leaderboard, self.board_id)
            if definition is None:
                raise LookupError(self.board_id)
            return definition

    async def _periods(self) -> list[tuple[str, int]]:
        async with self.services.databases.main_session() as session:
            return [(row[0], int(row[1])) for row in await session.execute(PERIOD_SIZES, {"board_id": self.board_id})]

    async def _copy(self) -> None:
        """Lay every period Redis holds out again in the new layout; the others are rebuilt in it
        when first read after the switch."""
        definition = await self._definition()
        now = utcnow()
        boards: list[tuple[store.Board, int]] = []
        for period, size in await self._periods():
            board = store.Board.of(self.services, definition, parse_window(definition.period_kind, period), now=now)
            expired = board.expires_at is not None and board.expires_at <= now
            moving = board.shadow is not None and board.shadow.generation == self.generation
            if not moving or expired or not await store.is_loaded(self.services.redis, board):
                continue
            boards.append((board, size))
        total = sum(size for _, size in boards)
        await self._sql(REPARTITION_TOTAL, total=total, board_id=self.board_id, generation=self.generation)
        moved = 0

        async def copied(count: int) -> None:
            nonlocal moved
            moved += count
            await self._report(moved)

        for board, size in boards:
            assert board.shadow is not None
            before = moved
            await store.rebuild(self.services, board.only(board.shadow), progress=copied)
            # A period an earlier mover (or a reader after the switch) already laid out counts whole.
            moved = before + max(size, moved - before)
            await self._report(moved)

    async def _report(self, moved: int) -> None:
        await self._sql(REPARTITION_PROGRESS, board_id=self.board_id, generation=self.generation, moved=moved)

    async def _switch(self) -> None:
        async with self.services.databases.main_session() as session:
            params = {"board_id": self.board_id, "generation": self.generation}
            await session.execute(SWITCH_LAYOUT, params)
            await session.execute(
                MARK_REPARTITION,
                {**params, "from_state": RepartitionState.COPYING.value, "to_state": RepartitionState.SWITCHED.value},
            )
            await session.commit()

    async def _mark(self, from_state: RepartitionState, to_state: RepartitionState) -> None:
        params = {"from_state": from_state.value, "to_state": to_state.value}
        await self._sql(MARK_REPARTITION, board_id=self.board_id, generation=self.generation, **params)

    async def _drop_old_keys(self) -> None:
        """The previous layout of every period: no process reads or writes it any more."""
        async with self.services.databases.main_session() as session:
            row = await session.get(LeaderboardRepartition, (self.board_id, self.generation))
        if row is None:
            return
        partitions = len(row.previous_bounds) + 1
        redis, keys = self.services.redis, self.services.keys
        for period, _ in await self._periods():
            old = board_keys(
                keys, board_id=self.board_id, period=period, partitions=partitions, generation=self.generation - 1
            )
            # The cluster client splits a multi-key UNLINK by slot itself.
            await redis.unlink(*old.script_keys, old.rebuild_lock)
