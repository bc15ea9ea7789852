from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlmodel import col

from mediagraph.dataloaders.base import Loader
from mediagraph.db.leaderboards import Leaderboard

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
            async with self.context.db.use() as session:
                rows = (await session.execute(select(Leaderboard).where(col(Leaderboard.name).in_(missing)))).scalars()
                for row in rows:
                    remember(database, row)
        return [_known.get((database, name)) for name in keys]


class LeaderboardByIdLoader(Loader[int, Leaderboard | None]):
    async def load_batch(self, keys: list[int]) -> Sequence[Leaderboard | None]:
        async with self.context.db.use() as session:
            rows = (await session.execute(select(Leaderboard).where(col(Leaderboard.id).in_(keys)))).scalars()
            found = {row.id: row for row in rows}
        return [found.get(key) for key in keys]
