from __future__ import annotations

import time
from collections.abc import Sequence

from mediagraph.dataloaders.base import Loader
from mediagraph.db.leaderboards import LATEST_REPARTITIONS, REPARTITIONS_BY_KEY, Leaderboard, LeaderboardRepartition
from mediagraph.db.rows import RowBuilder, select_where_any
from mediagraph.services import Services

LEADERBOARDS_BY_NAME = select_where_any(Leaderboard, "name")
LEADERBOARDS_BY_ID = select_where_any(Leaderboard, "id")
leaderboard_rows = RowBuilder(Leaderboard)
repartition_rows = RowBuilder(LeaderboardRepartition)

# Definitions change only in their partition layout (a re-partitioning), so each process
# keeps what it has read for `leaderboard_definition_refresh_seconds`, keyed by database so
# that processes (or tests) on different databases never mix them up. A re-partitioning
# waits longer than that between its steps, so every process follows it (see
# `resolvers/leaderboards/repartition.py`). Absence is not cached: a board defined by
# another process must be found at once.
_known: dict[tuple[str, str], tuple[Leaderboard, float]] = {}


def remember(database_url: str, board: Leaderboard, *, read_at: float | None = None) -> None:
    """Keep a definition read at `read_at` (monotonic; taken before the read began)."""
    _known[(database_url, board.name)] = (board, time.monotonic() if read_at is None else read_at)


def forget(database_url: str, name: str) -> None:
    """Read the definition again next time (this process changed it)."""
    _known.pop((database_url, name), None)


def _fresh(services: Services, name: str) -> Leaderboard | None:
    held = _known.get((services.endpoints.database_url, name))
    if held is None or time.monotonic() - held[1] > services.settings.leaderboard_definition_refresh_seconds:
        return None
    return held[0]


async def current_definition(services: Services, definition: Leaderboard) -> Leaderboard:
    """The board's definition as it stands now (its layout may have moved since `definition` was read)."""
    known = _fresh(services, definition.name)
    if known is not None:
        return known
    read_at = time.monotonic()
    found = await services.databases.main_reads.fetch_keyed(LEADERBOARDS_BY_ID, "id", [definition.id])
    if definition.id not in found:
        return definition
    current = leaderboard_rows(found[definition.id])
    remember(services.endpoints.database_url, current, read_at=read_at)
    return current


class LeaderboardByNameLoader(Loader[str, Leaderboard | None]):
    def known(self, key: str) -> Leaderboard | None:
        # Every submitScore names its board: one this process holds fresh settles at once,
        # with no batch to wait for.
        return _fresh(self.context.services, key)

    async def load_batch(self, keys: list[str]) -> Sequence[Leaderboard | None]:
        services = self.context.services
        database = services.endpoints.database_url
        known = {name: _fresh(services, name) for name in keys}
        missing = [name for name, board in known.items() if board is None]
        if missing:
            read_at = time.monotonic()
            found = await services.databases.main_reads.fetch_keyed(LEADERBOARDS_BY_NAME, "name", missing)
            for row in found.values():
                board = leaderboard_rows(row)
                remember(database, board, read_at=read_at)
                known[board.name] = board
        return [known.get(name) for name in keys]


class LeaderboardByIdLoader(Loader[int, Leaderboard | None]):
    async def load_batch(self, keys: list[int]) -> Sequence[Leaderboard | None]:
        found = await self.context.services.databases.main_reads.fetch_keyed(LEADERBOARDS_BY_ID, "id", keys)
        return [leaderboard_rows(found[key]) if key in found else None for key in keys]


class LatestRepartitionByBoardLoader(Loader[int, LeaderboardRepartition | None]):
    """The newest re-partitioning of each board (None: never re-partitioned)."""

    async def load_batch(self, keys: list[int]) -> Sequence[LeaderboardRepartition | None]:
        rows = await self.context.services.databases.main_reads.fetch(LATEST_REPARTITIONS, keys)
        found = {row["leaderboard_id"]: repartition_rows(row) for row in rows}
        return [found.get(key) for key in keys]


class RepartitionByKeyLoader(Loader[tuple[int, int], LeaderboardRepartition | None]):
    """Re-partitionings by (board, generation)."""

    async def load_batch(self, keys: list[tuple[int, int]]) -> Sequence[LeaderboardRepartition | None]:
        boards, generations = [board for board, _ in keys], [generation for _, generation in keys]
        rows = await self.context.services.databases.main_reads.fetch(REPARTITIONS_BY_KEY, boards, generations)
        found = {(row["leaderboard_id"], row["generation"]): repartition_rows(row) for row in rows}
        return [found.get(key) for key in keys]
