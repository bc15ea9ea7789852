"""A leaderboard period in Redis: applying records, ranked reads, and the lazy rebuild from PostgreSQL."""

from __future__ import annotations

import asyncio
import bisect
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from mediagraph.db.leaderboards import Leaderboard, ScoreRecord, SortOrder, score_records
from mediagraph.errors import ServiceUnavailable
from mediagraph.keys.leaderboards import BoardKeys, board_changed_channel, board_keys
from mediagraph.keys.leaderboards.lua import (
    apply_script,
    around_script,
    entries_script,
    extend_lock_script,
    range_script,
    release_lock_script,
)
from mediagraph.resolvers.leaderboards.periods import PeriodWindow
from mediagraph.services import Services

T = TypeVar("T")

REBUILD_CHUNK = 2_000
REBUILD_LOCK_MS = 30_000
REBUILD_WAIT_SECONDS = 60.0
REBUILD_POLL_SECONDS = 0.02
# A read, a rebuild (or waiting for one), a read; once more if the other rebuild failed.
REBUILD_ATTEMPTS = 3


@dataclass(frozen=True)
class Board:
    """One period of one board, as the store addresses it."""

    definition: Leaderboard
    window: PeriodWindow
    keys: BoardKeys
    expires_at: datetime | None

    @classmethod
    def of(cls, services: Services, definition: Leaderboard, window: PeriodWindow, *, now: datetime) -> Board:
        settings = services.settings
        return cls(
            definition=definition,
            window=window,
            keys=board_keys(
                services.keys,
                board_id=definition.id,
                period=window.key,
                partitions=len(definition.partition_bounds) + 1,
            ),
            expires_at=window.expires_at(
                now,
                grace=timedelta(seconds=settings.leaderboard_history_grace_seconds),
                history_cache=timedelta(seconds=settings.leaderboard_history_cache_seconds),
            ),
        )

    @property
    def descending(self) -> bool:
        return self.definition.order is SortOrder.DESC

    def stored(self, score: float) -> float:
        """Ascending stored order is rank order on every board."""
        return 0.0 - score if self.descending else score

    def shown(self, stored: float) -> float:
        return 0.0 - stored if self.descending else stored

    def partition(self, score: float) -> int:
        """The partition in rank order (0 holds the best scores)."""
        bounds = self.definition.partition_bounds
        index = bisect.bisect_right(bounds, score)
        return len(bounds) - index if self.descending else index


@dataclass(frozen=True)
class RankedEntry:
    rank: int  # from 1
    user_id: int
    score: float
    reached_id: int


@dataclass(frozen=True)
class Slice:
    total: int
    start: int  # 0-based position of the first entry
    entries: list[RankedEntry]


class NotLoaded(Exception):
    """The period is missing from Redis (or only partly there): rebuild it, then ask again."""


def _entry(board: Board, position: int, member: bytes | str, stored: bytes | str) -> RankedEntry:
    text = member.decode() if isinstance(member, bytes) else member
    reached, _, user = text.partition(":")
    return RankedEntry(
        rank=position + 1, user_id=int(user), score=board.shown(float(stored)), reached_id=int(reached, 16)
    )


def slice_of(board: Board, reply: list[Any]) -> Slice:
    if reply[0] == 0:
        raise NotLoaded
    total, start = int(reply[1]), int(reply[2])
    items = reply[3:]
    entries = [_entry(board, start + n, items[2 * n], items[2 * n + 1]) for n in range(len(items) // 2)]
    return Slice(total=total, start=start, entries=entries)


def entries_of(board: Board, reply: list[Any]) -> tuple[int, list[RankedEntry | None]]:
    if reply[0] == 0:
        raise NotLoaded
    values = reply[2:]
    found: list[RankedEntry | None] = []
    for n in range(0, len(values), 3):
        position, stored, member = values[n : n + 3]
        found.append(None if int(position) < 0 else _entry(board, int(position), member, stored))
    return int(reply[1]), found


def record_args(board: Board, records: Sequence[ScoreRecord]) -> list[Any]:
    args: list[Any] = []
    for record in records:
        args += [
            record.user_id,
            record.version,
            board.partition(record.score),
            f"{record.reached_id:016x}",
            repr(board.stored(record.score)),
        ]
    return args


def _expire_ms(board: Board) -> int:
    return int(board.expires_at.timestamp() * 1000) if board.expires_at is not None else 0


async def apply(services: Services, board: Board, records: Sequence[ScoreRecord], *, announce: bool) -> int:
    channel = board_changed_channel(services.keys, board.definition.id) if announce else ""
    # The event bus decodes every message as JSON.
    message = orjson.dumps({"period": board.window.key})
    args = [_expire_ms(board), channel, message, *record_args(board, records)]
    return int(await apply_script.run(services.redis, board.keys.script_keys, args))


async def read_range(
    redis: Redis,
    board: Board,
    *,
    start: int,
    count: int,
    after: tuple[str, int, float] | None = None,
    backward: bool = False,
) -> Slice:
    """`count` entries from position `start` on (or right after the `after` anchor while it keeps its
    score); `backward`, the `count` entries just above that position or anchor (`start` -1: the end)."""
    member, partition, stored = after if after is not None else ("", 0, 0.0)
    args = [start, count, member, partition, repr(stored), "before" if backward else "after"]
    return slice_of(board, await range_script.run(redis, board.keys.script_keys, args))


async def read_entries(redis: Redis, board: Board, user_ids: Sequence[int]) -> tuple[int, list[RankedEntry | None]]:
    return entries_of(board, await entries_script.run(redis, board.keys.script_keys, list(user_ids)))


async def read_around(redis: Redis, board: Board, *, user_id: int, radius: int) -> Slice:
    reply = await around_script.run(redis, board.keys.script_keys, [user_id, radius])
    if reply[0] != 0 and int(reply[2]) < 0:
        return Slice(total=int(reply[1]), start=-1, entries=[])
    return slice_of(board, reply)


def member_of(entry: RankedEntry) -> str:
    return f"{entry.reached_id:016x}:{entry.user_id}"


async def loaded(services: Services, board: Board, read: Callable[[], Awaitable[T]]) -> T:
    """Run a read; when the period is not in Redis, rebuild it from PostgreSQL (once) and read again."""
    try:
        for _ in range(REBUILD_ATTEMPTS):
            try:
                return await read()
            except NotLoaded:
                await rebuild(services, board)
    except (RedisError, OSError) as error:
        raise ServiceUnavailable("The leaderboard cannot be read right now; try again shortly.") from error
    raise ServiceUnavailable("The leaderboard is being rebuilt; try again shortly.")


async def is_loaded(redis: Redis, board: Board) -> bool:
    try:
        await read_entries(redis, board, [])
    except NotLoaded:
        return False
    return True


async def rebuild(services: Services, board: Board) -> None:
    """Load a period from its durable records. One caller rebuilds; concurrent callers wait for it.

    The keys are emptied before the records are read, so a score committed meanwhile is
    either in what is read or applied afterwards by its writer; versions settle the order.
    """
    redis, keys = services.redis, board.keys
    token = uuid.uuid4().hex
    if not await redis.set(keys.rebuild_lock, token, nx=True, px=REBUILD_LOCK_MS):
        await _wait_for_rebuild(redis, keys)
        return
    try:
        # Another caller may have finished a rebuild between our read and taking the lock.
        if await is_loaded(redis, board):
            return
        await redis.unlink(keys.ready, keys.users, *keys.partitions)
        async with services.databases.main_session() as session:
            chunks = score_records(session, board_id=board.definition.id, period=board.window.key, chunk=REBUILD_CHUNK)
            async for chunk in chunks:
                await apply(services, board, chunk, announce=False)
                await extend_lock_script.run(redis, [keys.rebuild_lock], [token, REBUILD_LOCK_MS])
        expire_ms = _expire_ms(board)
        await redis.set(keys.ready, board.window.key, pxat=expire_ms or None)
    finally:
        await release_lock_script.run(redis, [keys.rebuild_lock], [token])


async def _wait_for_rebuild(redis: Redis, keys: BoardKeys) -> None:
    """Until the rebuilding caller is done (or its lock lapsed because it died)."""
    for _ in range(int(REBUILD_WAIT_SECONDS / REBUILD_POLL_SECONDS)):
        if not await redis.exists(keys.rebuild_lock):
            return
        await asyncio.sleep(REBUILD_POLL_SECONDS)
