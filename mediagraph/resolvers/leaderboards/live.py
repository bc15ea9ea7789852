"""Live leaderboards: one ticker per watched board per process, shared by every local subscriber.

A ticker wakes when the board's channel says it changed (or every few seconds, and when
the period rolls over), then reads the top N once, N being the largest any local
subscriber wants, and the ranks of every locally watched user: one pipelined round trip
to Redis, whatever the number of subscribers. Each subscriber keeps only the newest
state it has not yet sent, so a slow one never queues history.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlmodel import col

from mediagraph.dataloaders.leaderboards import current_definition
from mediagraph.db.base import utcnow
from mediagraph.db.leaderboards import Leaderboard
from mediagraph.db.users import User
from mediagraph.keys.leaderboards import board_changed_channel
from mediagraph.resolvers.leaderboards import store
from mediagraph.resolvers.leaderboards.periods import current_window
from mediagraph.resolvers.leaderboards.store import Board, RankedEntry
from mediagraph.services import Services

log = logging.getLogger(__name__)

# Users shown in pushes are re-read this often, so renamed accounts show their new nickname.
USER_CACHE_SECONDS = 60.0


@dataclass(frozen=True)
class TopState:
    board: Board
    entries: tuple[RankedEntry, ...]
    users: dict[int, User] = field(compare=False)


@dataclass(frozen=True)
class EntryState:
    board: Board
    user_id: int
    entry: RankedEntry | None
    user: User | None = field(compare=False)


@dataclass(eq=False)
class Watch:
    """One subscriber: what it watches, and the newest state it has not yet received."""

    first: int = 0
    user_id: int | None = None
    _latest: Any = None
    _sent: Any = None
    _ready: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, state: TopState | EntryState) -> None:
        key = (
            (state.board.window.key, state.entries)
            if isinstance(state, TopState)
            else (state.board.window.key, state.entry)
        )
        if key != self._sent:
            self._sent, self._latest = key, state
            self._ready.set()

    async def states(self) -> AsyncIterator[Any]:
        while True:
            await self._ready.wait()
            self._ready.clear()
            yield self._latest


class BoardTicker:
    def __init__(self, services: Services, definition: Leaderboard) -> None:
        self.services = services
        self.definition = definition
        self.watches: set[Watch] = set()
        self.ticks = 0
        self._wake = asyncio.Event()
        self._users: dict[int, User] = {}
        self._users_since = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"leaderboard-ticker:{self.definition.name}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def add(self, watch: Watch) -> None:
        self.watches.add(watch)
        self._wake.set()

    async def _run(self) -> None:
        settings = self.services.settings
        channel = board_changed_channel(self.services.keys, self.definition.id)
        async with self.services.bus.subscribe(channel, keep=1) as changes:
            listener = asyncio.create_task(self._listen(changes))
            try:
                while True:
                    await self._sleep_until_woken(settings.leaderboard_refresh_seconds)
                    self._wake.clear()
                    try:
                        await self.tick()
                    except Exception:
                        # Redis or PostgreSQL away for a moment: the next wake-up tries again.
                        log.exception("leaderboard %s: tick failed", self.definition.name)
                    # Spacing ticks coalesces a burst of updates into one read.
                    await asyncio.sleep(settings.leaderboard_tick_seconds)
            finally:
                listener.cancel()

    async def _listen(self, changes: AsyncIterator[Any]) -> None:
        try:
            async for _ in changes:
                self._wake.set()
        except Exception:
            log.exception("leaderboard %s: change notifications stopped; refreshing on a timer", self.definition.name)

    async def _sleep_until_woken(self, refresh: float) -> None:
        # Wake for the period rollover too: a new day starts a new board.
        ends_at = current_window(self.definition.period_kind, utcnow()).ends_at
        timeout = refresh if ends_at is None else min(refresh, max((ends_at - utcnow()).total_seconds(), 0.0) + 0.01)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout)

    async def tick(self) -> None:
        # The board's layout may move (a re-partitioning) while it is watched.
        self.definition = await current_definition(self.services, self.definition)
        board = store.Board.of(
            self.services, self.definition, current_window(self.definition.period_kind, utcnow()), now=utcnow()
        )
        watches = list(self.watches)
        first = max((watch.first for watch in watches), default=0)
        user_ids = sorted({watch.user_id for watch in watches if watch.user_id is not None})
        top, ranks = await store.loaded(self.services, board, lambda: self._read(board, first, user_ids))
        await self._load_users([entry.user_id for entry in top] + user_ids)
        self.ticks += 1
        for watch in watches:
            if watch.user_id is None:
                entries = tuple(top[: watch.first])
                watch.offer(
                    TopState(
                        board, entries, {e.user_id: self._users[e.user_id] for e in entries if e.user_id in self._users}
                    )
                )
            else:
                entry = ranks.get(watch.user_id)
                watch.offer(EntryState(board, watch.user_id, entry, self._users.get(watch.user_id)))

    async def _read(
        self, board: Board, first: int, user_ids: Sequence[int]
    ) -> tuple[list[RankedEntry], dict[int, RankedEntry | None]]:
        redis = self.services.redis
        top = (await store.read_range(redis, board, start=0, count=first)).entries
        _, found = await store.read_entries(redis, board, user_ids)
        return top, dict(zip(user_ids, found, strict=True))

    async def _load_users(self, user_ids: list[int]) -> None:
        """Users shown in pushes, read once per tick for newcomers only: never per subscriber."""
        now = asyncio.get_running_loop().time()
        if now - self._users_since > USER_CACHE_SECONDS:
            self._users, self._users_since = {}, now
        missing = [user_id for user_id in set(user_ids) if user_id not in self._users]
        if not missing:
            return
        async with self.services.databases.main_session() as session:
            rows = (await session.execute(select(User).where(col(User.id).in_(missing)))).scalars()
            self._users.update({row.id: row for row in rows})


class Tickers:
    """Every ticker of one process; a ticker lives while it has subscribers."""

    def __init__(self) -> None:
        self._tickers: dict[tuple[int, int], BoardTicker] = {}

    def ticker(self, services: Services, board_id: int) -> BoardTicker | None:
        return self._tickers.get((id(services), board_id))

    @contextlib.asynccontextmanager
    async def watch(self, services: Services, definition: Leaderboard, watch: Watch) -> AsyncIterator[Watch]:
        key = (id(services), definition.id)
        ticker = self._tickers.get(key)
        if ticker is None:
            ticker = self._tickers[key] = BoardTicker(services, definition)
            ticker.start()
        ticker.add(watch)
        try:
            yield watch
        finally:
            ticker.watches.discard(watch)
            if not ticker.watches and self._tickers.get(key) is ticker:
                del self._tickers[key]
                await ticker.stop()


tickers = Tickers()
