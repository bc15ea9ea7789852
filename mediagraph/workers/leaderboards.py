"""`mediagraph worker leaderboards`: carries re-partitionings of boards through to the end.

A move is started by `repartitionLeaderboard` (or `mediagraph leaderboards repartition`)
and lives in PostgreSQL with a lease; any copy of this worker claims one whose lease has
lapsed (just started, or its mover died) and resumes it from its recorded state.
"""

from __future__ import annotations

import asyncio
import contextlib

from mediagraph.observability.metrics import Lag
from mediagraph.resolvers.leaderboards import repartition
from mediagraph.services import Services

NAME = "leaderboards"
# How soon a move that was just asked for (or lost its mover) is taken up.
POLL_SECONDS = 1.0


async def run(services: Services, stop: asyncio.Event) -> None:
    while not stop.is_set():
        if await repartition.resume_one(services):
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), POLL_SECONDS)


async def lag(services: Services) -> list[Lag]:
    """Entries the unfinished moves have still to lay out, and how long the oldest has run."""
    left = await repartition.progress(services)
    return [Lag(NAME, "repartition", entries=left.entries_left, seconds=left.oldest_seconds)]
