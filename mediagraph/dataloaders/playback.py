from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mediagraph.dataloaders.base import Loader
from mediagraph.db.playback import PLAYBACK_TOTALS_OF, PLAYS_BY_KEY
from mediagraph.keys.playback import Counter, Entity
from mediagraph.keys.playback.scripts import CounterValue, PlaybackScripts
from mediagraph.services import Services

log = logging.getLogger(__name__)
REDIS_UNREACHABLE = (RedisConnectionError, RedisTimeoutError)


@dataclass(frozen=True)
class Figures:
    plays: int
    peak: int
    watch_ms: int = 0
    unique_viewers: int = 0


# A counter's PostgreSQL row of one generation: generation, plays, peak, watch ms, unique viewers.
DurableRow = tuple[int, int, int, int, int]


def merge(durable: Iterable[DurableRow], live: CounterValue | None) -> Figures:
    """One counter's figures from its PostgreSQL rows and Redis.

    Generations Redis no longer holds are complete in PostgreSQL; for the one it holds,
    Redis is at least as new (its values only grow), unless the roll-up got there first.
    Distinct viewers of two generations may overlap; their sum bounds them from above.
    """
    plays = peak = watch_ms = unique = 0
    live_plays = live_watch = live_unique = 0
    for generation, row_plays, row_peak, row_watch, row_unique in durable:
        peak = max(peak, row_peak)
        if live is not None and generation == live.generation:
            live_plays, live_watch, live_unique = row_plays, row_watch, row_unique
        else:
            plays += row_plays
            watch_ms += row_watch
            unique += row_unique
    if live is not None:
        live_plays = max(live_plays, live.plays)
        live_watch = max(live_watch, live.watch_ms)
        live_unique = max(live_unique, live.unique_viewers)
        peak = max(peak, live.peak)
    return Figures(plays + live_plays, peak, watch_ms + live_watch, unique + live_unique)


async def read_counters(services: Services, counters: Sequence[Counter]) -> list[CounterValue | None]:
    """What Redis still holds of the counters. While Redis is unreachable: nothing, so
    figures come from PostgreSQL alone, missing at most what the roll-up had not copied
    (new plays of the last interval, growth of the last `playback_rollup_delay_seconds`)."""
    try:
        return await PlaybackScripts(services.redis, services.keys).read(counters)
    except REDIS_UNREACHABLE as error:
        log.warning("Redis unreachable; playback figures from PostgreSQL alone: %s", error)
        return [None] * len(counters)


class PlaybackTotalByEntityLoader(Loader[Entity, Figures]):
    """All-time plays and watch time of streams and channels."""

    async def load_batch(self, keys: list[Entity]) -> Sequence[Figures]:
        wanted = [(entity.kind.value, entity.id) for entity in keys]
        kinds, ids = [kind for kind, _ in wanted], [entity_id for _, entity_id in wanted]
        rows = await self.context.services.databases.main_reads.fetch(PLAYBACK_TOTALS_OF, kinds, ids)
        durable: dict[tuple[str, int], list[DurableRow]] = {}
        for kind, entity_id, generation, plays, watch_ms in rows:
            durable.setdefault((kind, entity_id), []).append((generation, plays, 0, watch_ms, 0))
        live = await read_counters(self.context.services, [Counter(entity) for entity in keys])
        return [merge(durable.get(wanted_key, []), value) for wanted_key, value in zip(wanted, live, strict=True)]


@dataclass(frozen=True)
class PlayKey:
    """A play as its global id names it: its channel, when it started, its session."""

    channel_id: int
    started_at: datetime
    session_id: uuid.UUID


@dataclass(frozen=True)
class PlayRow:
    """A play as the roll-up last copied it."""

    channel_id: int
    started_at: datetime
    session_id: uuid.UUID
    media_id: int
    last_heartbeat_at: datetime
    watch_ms: int


class PlayByKeyLoader(Loader[PlayKey, "PlayRow | None"]):
    """Plays the roll-up has copied, by key; None for a key naming no play of that channel."""

    async def load_batch(self, keys: list[PlayKey]) -> Sequence[PlayRow | None]:
        columns = ([key.channel_id for key in keys], [key.started_at for key in keys], [key.session_id for key in keys])
        rows = await self.context.services.databases.main_reads.fetch(PLAYS_BY_KEY, *columns)
        # PLAYS_BY_KEY selects PlayRow's fields in order.
        plays = [PlayRow(*row) for row in rows]
        found = {PlayKey(play.channel_id, play.started_at, play.session_id): play for play in plays}
        return [found.get(key) for key in keys]
