"""A leaderboard period in Redis: applying records, ranked reads, and the lazy rebuild from PostgreSQL."""

from __future__ import annotations

import asyncio
import bisect
import functools
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from mediagraph.db.leaderboards import Leaderboard, ScoreRecord, SortOrder, score_records
from mediagraph.errors import ServiceUnavailable
from mediagraph.keys import KeySpace
from mediagraph.keys.leaderboards import BoardKeys, board_changed_channel, board_keys
from mediagraph.keys.leaderboards.lua import apply_script, extend_lock_script, release_lock_script, state_script
from mediagraph.lua import run_batched, run_pipeline
from mediagraph.resolvers.leaderboards.periods import PeriodWindow
from mediagraph.services import Services

T = TypeVar("T")

REBUILD_CHUNK = 2_000
REBUILD_LOCK_MS = 30_000
REBUILD_WAIT_SECONDS = 60.0
REBUILD_POLL_SECONDS = 0.02
# A read, a rebuild (or waiting for one), a read; once more if the other rebuild failed.
REBUILD_ATTEMPTS = 3
# A user moving between partitions on two nodes is missing from both for the moment between
# the two writes: a read that meets that waits a little and reads again.
MOVE_RETRIES = 20
MOVE_RETRY_SECONDS = 0.002


@dataclass(frozen=True)
class Layout:
    """One way of splitting a period into partitions by score, and the keys it lives under."""

    bounds: tuple[float, ...]
    generation: int
    keys: BoardKeys
    descending: bool

    def partition(self, score: float) -> int:
        """The partition in rank order (0 holds the best scores)."""
        index = bisect.bisect_right(self.bounds, score)
        return len(self.bounds) - index if self.descending else index


def _layout(services: Services, definition: Leaderboard, period: str, bounds: list[float], generation: int) -> Layout:
    return _layout_of(
        services.keys, definition.id, period, tuple(bounds), generation, definition.order is SortOrder.DESC
    )


# Every score submitted to a board in a period names the same layout: its keys are built
# once (4 us for one partition, 14 us for five) instead of on every submission.
@functools.lru_cache(maxsize=4096)
def _layout_of(
    keys: KeySpace, board_id: int, period: str, bounds: tuple[float, ...], generation: int, descending: bool
) -> Layout:
    board = board_keys(keys, board_id=board_id, period=period, partitions=len(bounds) + 1, generation=generation)
    return Layout(bounds, generation, board, descending)


@dataclass(frozen=True)
class Board:
    """One period of one board, as the store addresses it."""

    definition: Leaderboard
    window: PeriodWindow
    # What reads use; writes go to the shadow too while a re-partitioning is under way.
    layout: Layout
    shadow: Layout | None
    expires_at: datetime | None

    @classmethod
    def of(cls, services: Services, definition: Leaderboard, window: PeriodWindow, *, now: datetime) -> Board:
        settings = services.settings
        layout = _layout(services, definition, window.key, definition.partition_bounds, definition.layout_generation)
        shadow = None
        if definition.shadow_bounds is not None and definition.shadow_generation is not None:
            shadow = _layout(services, definition, window.key, definition.shadow_bounds, definition.shadow_generation)
        return cls(
            definition=definition,
            window=window,
            layout=layout,
            shadow=shadow,
            expires_at=window.expires_at(
                now,
                grace=timedelta(seconds=settings.leaderboard_history_grace_seconds),
                history_cache=timedelta(seconds=settings.leaderboard_history_cache_seconds),
            ),
        )

    @property
    def keys(self) -> BoardKeys:
        return self.layout.keys

    @property
    def layouts(self) -> tuple[Layout, ...]:
        """Every layout writes keep, the read layout first."""
        return (self.layout,) if self.shadow is None else (self.layout, self.shadow)

    def only(self, layout: Layout) -> Board:
        """This period on one layout alone (a rebuild or a move fills one layout)."""
        return replace(self, layout=layout, shadow=None)

    @property
    def descending(self) -> bool:
        return self.definition.order is SortOrder.DESC

    def stored(self, score: float) -> float:
        """Ascending stored order is rank order on every board."""
        return 0.0 - score if self.descending else score

    def shown(self, stored: float) -> float:
        return 0.0 - stored if self.descending else stored

    def partition(self, score: float) -> int:
        """The partition in rank order (0 holds the best scores) on the read layout."""
        return self.layout.partition(score)


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


@dataclass(frozen=True)
class Held:
    """What one partition holds of one user."""

    version: int
    rank: int  # inside the partition; -1 when the user is not in it
    stored: str
    member: str


@dataclass(frozen=True)
class PartState:
    size: int
    anchor_rank: int
    users: list[Held]


@dataclass(frozen=True)
class BoardState:
    """Every partition's size (and what it holds of some users), read in one pipelined round trip."""

    parts: list[PartState]

    @property
    def total(self) -> int:
        return sum(part.size for part in self.parts)

    def offset(self, partition: int) -> int:
        """Entries in the better partitions: the position of the partition's first entry."""
        return sum(part.size for part in self.parts[:partition])

    def moving(self) -> bool:
        """Whether some user asked for is between partitions: the newest record seen left one
        partition and has not reached the other yet (a write to another node in flight)."""
        return any(
            self.locate(at) is None and any(part.users[at].version for part in self.parts)
            for at in range(len(self.parts[0].users) if self.parts else 0)
        )

    def locate(self, user_index: int) -> tuple[int, Held] | None:
        """The user's partition and entry: where the newest record seen put them."""
        # The record's own partition and the ones it left share its version: the member wins.
        newest = max(
            range(len(self.parts)),
            key=lambda at: (self.parts[at].users[user_index].version, self.parts[at].users[user_index].rank >= 0),
        )
        held = self.parts[newest].users[user_index]
        return (newest, held) if held.rank >= 0 else None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _part_state(reply: list[Any]) -> PartState:
    if int(reply[0]) == 0:
        raise NotLoaded
    values = reply[3:]
    users = [
        Held(int(_text(values[n])), int(values[n + 1]), _text(values[n + 2]), _text(values[n + 3]))
        for n in range(0, len(values), 4)
    ]
    return PartState(size=int(reply[1]), anchor_rank=int(reply[2]), users=users)


async def read_state(
    redis: Redis, board: Board, *, user_ids: Sequence[int] = (), anchor: tuple[str, int, float] | None = None
) -> BoardState:
    def build(pipe: Any) -> None:
        for index, part in enumerate(board.keys.parts):
            member, stored = ("", 0.0) if anchor is None or anchor[1] != index else (anchor[0], anchor[2])
            state_script.queue(pipe, part.script_keys, [member, repr(stored), *user_ids])

    return BoardState([_part_state(reply) for reply in await run_pipeline(redis, [state_script], build)])


async def read_settled_state(redis: Redis, board: Board, *, user_ids: Sequence[int]) -> BoardState:
    """`read_state` of users, read again while one of them is between two partitions (for a moment)."""
    for _ in range(MOVE_RETRIES):
        state = await read_state(redis, board, user_ids=user_ids)
        if not state.moving():
            break
        await asyncio.sleep(MOVE_RETRY_SECONDS)
    return state


async def read_slice(redis: Redis, board: Board, state: BoardState, *, start: int, count: int) -> Slice:
    """`count` entries from position `start` on, read from the partitions that hold them."""
    wanted: list[tuple[int, int, int]] = []  # partition, first rank inside it, how many
    skip, left = start, count
    for index, part in enumerate(state.parts):
        if left <= 0:
            break
        if skip >= part.size:
            skip -= part.size
            continue
        take = min(left, part.size - skip)
        wanted.append((index, skip, take))
        left -= take
        skip = 0
    entries: list[RankedEntry] = []
    if wanted:
        async with redis.pipeline(transaction=False) as pipe:
            for index, first, take in wanted:
                pipe.zrange(board.keys.parts[index].entries, first, first + take - 1, withscores=True)
            replies = await pipe.execute()
        for reply in replies:
            for member, stored in reply:
                entries.append(_entry(board, start + len(entries), member, repr(stored)))
    return Slice(total=state.total, start=start, entries=entries)


def record_args(board: Board, layout: Layout, record: ScoreRecord, partition: int) -> list[Any]:
    if layout.partition(record.score) != partition:
        return [record.user_id, record.version, 0, "", ""]
    return [record.user_id, record.version, 1, f"{record.reached_id:016x}", repr(board.stored(record.score))]


def _expire_ms(board: Board) -> int:
    return int(board.expires_at.timestamp() * 1000) if board.expires_at is not None else 0


async def apply(services: Services, board: Board, records: Sequence[ScoreRecord], *, announce: bool) -> int:
    """Apply records to every partition of every layout kept (one pipelined round trip); how many
    were newer than what the read layout held."""
    expire_ms = _expire_ms(board)
    # The event bus decodes every message as JSON.
    message = orjson.dumps({"period": board.window.key})

    def build(pipe: Any) -> None:
        for layout in board.layouts:
            for index, part in enumerate(layout.keys.parts):
                args = [arg for record in records for arg in record_args(board, layout, record, index)]
                apply_script.queue(pipe, part.script_keys, [expire_ms, *args])
        if announce:
            services.keys.publish(pipe, board_changed_channel(services.keys, board.definition.id), message)

    # Versions make applying a record idempotent, so a batched call may run twice.
    replies = await run_batched(services.redis, [apply_script], build)
    return sum(int(reply) for reply in replies[: len(board.keys.parts)])


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
    state = await read_state(redis, board, anchor=after)
    total = state.total
    if start < 0:
        start = total
    if after is not None and after[1] < len(state.parts):
        rank = state.parts[after[1]].anchor_rank
        if rank >= 0:
            start = state.offset(after[1]) + rank + (0 if backward else 1)
    if backward:
        stop = min(start, total)
        start = max(0, stop - count)
        count = stop - start
    return await read_slice(redis, board, state, start=start, count=count)


async def read_entries(redis: Redis, board: Board, user_ids: Sequence[int]) -> tuple[int, list[RankedEntry | None]]:
    state = await read_settled_state(redis, board, user_ids=user_ids)
    found: list[RankedEntry | None] = []
    for at in range(len(user_ids)):
        located = state.locate(at)
        if located is None:
            found.append(None)
        else:
            partition, held = located
            found.append(_entry(board, state.offset(partition) + held.rank, held.member, held.stored))
    return state.total, found


async def read_around(redis: Redis, board: Board, *, user_id: int, radius: int) -> Slice:
    state = await read_settled_state(redis, board, user_ids=[user_id])
    located = state.locate(0)
    if located is None:
        return Slice(total=state.total, start=-1, entries=[])
    partition, held = located
    at = state.offset(partition) + held.rank
    start = max(0, at - radius)
    return await read_slice(redis, board, state, start=start, count=at - start + 1 + radius)


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


async def rebuild(
    services: Services, board: Board, *, progress: Callable[[int], Awaitable[None]] | None = None
) -> bool:
    """Load a period's read layout from its durable records; whether this caller did. One caller
    rebuilds; concurrent callers wait for it. `progress` hears how many records each chunk held.

    The keys are emptied before the records are read, so a score committed meanwhile is
    either in what is read or applied afterwards by its writer; versions settle the order.
    """
    redis, keys = services.redis, board.keys
    token = uuid.uuid4().hex
    if not await redis.set(keys.rebuild_lock, token, nx=True, px=REBUILD_LOCK_MS):
        await _wait_for_rebuild(redis, keys)
        return False
    try:
        # Another caller may have finished a rebuild between our read and taking the lock.
        if await is_loaded(redis, board):
            return False
        await redis.unlink(*keys.script_keys)
        alone = board.only(board.layout)
        async with services.databases.main_session() as session:
            chunks = score_records(session, board_id=board.definition.id, period=board.window.key, chunk=REBUILD_CHUNK)
            async for chunk in chunks:
                await apply(services, alone, chunk, announce=False)
                await extend_lock_script.run(redis, [keys.rebuild_lock], [token, REBUILD_LOCK_MS])
                if progress is not None:
                    await progress(len(chunk))
        expire_ms = _expire_ms(board)
        async with redis.pipeline(transaction=False) as pipe:
            for part in keys.parts:
                pipe.set(part.ready, board.window.key, pxat=expire_ms or None)
            await pipe.execute()
        return True
    finally:
        await release_lock_script.run(redis, [keys.rebuild_lock], [token])


async def _wait_for_rebuild(redis: Redis, keys: BoardKeys) -> None:
    """Until the rebuilding caller is done (or its lock lapsed because it died)."""
    for _ in range(int(REBUILD_WAIT_SECONDS / REBUILD_POLL_SECONDS)):
        if not await redis.exists(keys.rebuild_lock):
            return
        await asyncio.sleep(REBUILD_POLL_SECONDS)
