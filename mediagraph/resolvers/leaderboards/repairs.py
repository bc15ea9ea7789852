"""Scores PostgreSQL recorded while Redis was unreachable, applied again once it answers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from redis.exceptions import RedisError

from mediagraph.dataloaders.leaderboards import current_definition
from mediagraph.db.availability import database_unreachable
from mediagraph.db.base import utcnow
from mediagraph.db.leaderboards import ScoreRecord
from mediagraph.resolvers.leaderboards.store import Board, apply
from mediagraph.services import Services

log = logging.getLogger(__name__)

# How long a process keeps retrying scores Redis missed.
REPAIR_SECONDS = 600.0


class Repairs:
    """Records PostgreSQL holds but Redis missed (it was unreachable), applied again until it answers.

    Applying is idempotent and version-guarded, so a late repair never overwrites a newer
    record; one task per process drains them, keeping only each user's newest record.
    """

    def __init__(self) -> None:
        self.pending: dict[tuple[str, int], tuple[Board, ScoreRecord]] = {}
        self._task: asyncio.Task[None] | None = None

    def add(self, services: Services, board: Board, records: Sequence[ScoreRecord]) -> None:
        for record in records:
            key = (board.keys.rebuild_lock, record.user_id)
            held = self.pending.get(key)
            if held is None or held[1].version < record.version:
                self.pending[key] = (board, record)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(services))

    async def _drain(self, services: Services) -> None:
        delay = 0.1
        deadline = asyncio.get_running_loop().time() + REPAIR_SECONDS
        while self.pending and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(delay)
            for key, (board, record) in list(self.pending.items()):
                try:
                    await apply(services, await _now_laid_out(services, board), [record], announce=True)
                except (RedisError, OSError):
                    delay = min(delay * 2, 5.0)
                    break
                held = self.pending.get(key)
                if held is not None and held[1] is record:
                    del self.pending[key]
        if self.pending:
            log.error(
                "leaderboards: %d recorded scores never reached Redis; they show again once their board "
                "is rebuilt from PostgreSQL or their users score again",
                len(self.pending),
            )
            self.pending.clear()


async def _now_laid_out(services: Services, board: Board) -> Board:
    """The board on the layouts it has now: a re-partitioning may have moved it since the record."""
    try:
        definition = await current_definition(services, board.definition)
    except Exception as error:
        if not database_unreachable(error):
            raise
        return board
    return Board.of(services, definition, board.window, now=utcnow())


repairs = Repairs()
