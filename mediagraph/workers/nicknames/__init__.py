"""`mediagraph worker nicknames`: replays the nickname log onto every shard, and tidies up.

Every pass brings each shard up to the log heads (or resyncs it); every maintenance
interval it also repairs comments whose creation stopped before confirming, prunes
logs every shard has applied, and drops old tombstones. Any number of copies may run:
replayers of one shard and queue take turns on the shard's offset row.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from mediagraph.db.base import utcnow
from mediagraph.db.comments import CommentTombstone
from mediagraph.db.shards.residency import read_shard
from mediagraph.errors import ServiceUnavailable
from mediagraph.observability.metrics import Lag
from mediagraph.services import Services
from mediagraph.workers.nicknames.replay import (
    prune_logs,
    queue_heads,
    repair_unconfirmed,
    replay_shard,
    shard_offsets,
)

NAME = "nicknames"
MAINTENANCE_EVERY_SECONDS = 30.0
# Tombstones serve shard moves running now; a week is far longer than any move.
TOMBSTONE_RETENTION = timedelta(days=7)

log = logging.getLogger(__name__)


async def replay_all(services: Services) -> None:
    async def one(physical: int) -> None:
        try:
            report = await replay_shard(services, physical)
        except ServiceUnavailable:
            log.warning("shard %s unavailable; its nickname replay waits", physical)
            return
        if report.resynced:
            log.info("shard %s was too far behind and was resynced from the users table", physical)

    await asyncio.gather(*(one(physical) for physical in range(len(services.databases.shards))))


async def lag(services: Services) -> list[Lag]:
    """Per queue, the logs the furthest-behind shard has still to apply (shards that are down left out)."""
    heads = await queue_heads(services)
    behind = dict.fromkeys(heads, 0)
    for physical in range(len(services.databases.shards)):
        try:
            offsets = await shard_offsets(services, physical)
        except ServiceUnavailable:
            continue
        for queue, head in heads.items():
            behind[queue] = max(behind[queue], head - offsets.get(queue, 0))
    return [Lag(NAME, str(queue), entries=count) for queue, count in sorted(behind.items())]


async def maintain(services: Services) -> None:
    for physical in range(len(services.databases.shards)):
        try:
            repaired = await repair_unconfirmed(services, physical)
            if repaired:
                log.info("repaired %s unconfirmed comments on shard %s", repaired, physical)
            await prune_tombstones(services, physical)
        except ServiceUnavailable:
            log.warning("shard %s unavailable; maintenance skipped", physical)
    try:
        await prune_logs(services)
    except ServiceUnavailable:
        log.info("a shard is unavailable; nickname logs are kept until it reports its offsets")


async def prune_tombstones(services: Services, physical: int) -> None:
    cutoff = utcnow() - TOMBSTONE_RETENTION

    async def work(session: AsyncSession) -> None:
        await session.execute(delete(CommentTombstone).where(col(CommentTombstone.created_at) < cutoff))
        await session.commit()

    await read_shard(services, physical, work)


async def run(services: Services, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    next_maintenance = loop.time()
    while not stop.is_set():
        await replay_all(services)
        if loop.time() >= next_maintenance:
            await maintain(services)
            next_maintenance = loop.time() + MAINTENANCE_EVERY_SECONDS
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), services.settings.nickname_replay_interval_seconds)
