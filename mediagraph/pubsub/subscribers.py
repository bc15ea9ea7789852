"""How many subscribers a channel has, anywhere: PUBSUB NUMSUB, or SHARDNUMSUB on a cluster.

On a cluster an entity channel is sharded, and only the primary owning its slot knows
its subscribers; the channels are asked of their nodes, one command per node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from mediagraph.keys import KeySpace


async def subscriber_counts(redis: Redis, keys: KeySpace, channels: Sequence[str]) -> list[int]:
    """Subscribers of each of `channels`, in order."""
    if not channels:
        return []
    if not isinstance(redis, RedisCluster):
        return [int(count) for _, count in await redis.pubsub_numsub(*channels)]
    by_node: dict[str, list[str]] = {}
    nodes: dict[str, Any] = {}
    for channel in channels:
        node = redis.get_node_from_key(channel) if keys.is_sharded(channel) else redis.get_random_node()
        if node is None:
            raise ConnectionError(f"no cluster node serves the slot of {channel}")
        nodes[node.name] = node
        by_node.setdefault(node.name, []).append(channel)

    async def ask(name: str) -> list[Any]:
        command = "SHARDNUMSUB" if keys.sharded_pubsub else "NUMSUB"
        reply: Any = await redis.execute_command("PUBSUB", command, *by_node[name], target_nodes=nodes[name])
        return list(reply)

    replies = await asyncio.gather(*(ask(name) for name in by_node))
    counts: dict[str, int] = {}
    for reply in replies:
        for at in range(0, len(reply), 2):
            name = reply[at].decode() if isinstance(reply[at], bytes) else str(reply[at])
            counts[name] = int(reply[at + 1])
    return [counts.get(channel, 0) for channel in channels]
