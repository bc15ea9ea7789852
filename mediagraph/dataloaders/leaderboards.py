from __future__ import annotations

from collections.abc import Sequence

from mediagraph.dataloaders.base import Loader
from mediagraph.db.leaderboards import Leaderboard
from mediagraph.db.rows import RowBuilder, select_where_any

LEADERBOARDS_BY_NAME = select_where_any(Leaderboard, "name")
LEADERBOARDS_BY_ID = select_where_any(Leaderboard, "id")
leaderboard_rows = RowBuilder(Leaderboard)

# Definitions never change once created, so each process keeps what it has read, keyed
# by database so that processes (or tests) on different databases never mix them up.
# Absence is not cached: a board defined by another process must be found at once.
_known: dict[tuple[str, str], Leaderboard] = {}


def remember(database_url: str, board: Leaderboard) -> None:
    _known[(database_url, board.name)] = board


class LeaderboardByNameLoader(Loader[str, Leaderboard | None]):
    async def load_batch(self, keys: list[str]) -> Sequence[Leaderboard | None]:
        database = self.context.services.endpoints.database_url
        missing = [name for name in keys if (database, name) not in _known]
        if missing:
            found = await self.context.services.databases.main_reads.fetch_keyed(LEADERBOARDS_BY_NAME, "name", missing)
            for row in found.values():
                remember(database, leaderboard_rows(row))
        return [_known.get((database, name)) for name in keys]


class LeaderboardByIdLoader(Loader[int, Leaderboard | None]):
    async def load_batch(self, keys: list[int]) -> Sequence[Leaderboard | None]:
        found = await self.context.services.databases.main_reads.fetch_keyed(LEADERBOARDS_BY_ID, "id", keys)
        return [leaderboard_rows(found[key]) if key in found else None for key in keys]
