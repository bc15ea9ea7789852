"""Routes media ids to shards: logical shard = media id mod L, then the shard_map table."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from mediagraph.db.shards import ShardMapping

log = logging.getLogger(__name__)


class ShardRouter:
    def __init__(self, logical_shards: int, physical_shards: int) -> None:
        self.logical_shards = logical_shards
        self.physical_shards = physical_shards
        # Until the map is loaded, the layout `provision` seeds: round robin.
        self._physical = [n % physical_shards for n in range(logical_shards)]

    def logical_shard(self, media_id: int) -> int:
        return media_id % self.logical_shards

    def physical_shard(self, media_id: int) -> int:
        return self._physical[self.logical_shard(media_id)]

    def physical_of_logical(self, logical_shard: int) -> int:
        return self._physical[logical_shard]

    def group_by_shard(self, media_ids: Iterable[int]) -> dict[int, list[int]]:
        groups: dict[int, list[int]] = defaultdict(list)
        for media_id in media_ids:
            groups[self.physical_shard(media_id)].append(media_id)
        return dict(groups)

    def assign(self, logical_shard: int, physical_shard: int) -> None:
        self._physical[logical_shard] = physical_shard

    async def reload(self, session: AsyncSession) -> None:
        rows = (await session.execute(select(ShardMapping))).scalars().all()
        beyond = []
        for row in rows:
            if row.logical_shard >= self.logical_shards:
                continue
            if row.physical_shard < self.physical_shards:
                self._physical[row.logical_shard] = row.physical_shard
            else:
                beyond.append(row.logical_shard)
        if beyond:
            # A shard added to MEDIAGRAPH_SHARD_URLS elsewhere and moved onto: this process
            # would read those comments from their old home, empty once the move is done.
            log.error(
                "logical shards %s live on physical shards beyond the %d in this process's "
                "MEDIAGRAPH_SHARD_URLS; restart it with the full list",
                beyond,
                self.physical_shards,
            )
