"""CPU time a server spends: what a request costs it, whatever else runs.

On a shared machine a server's throughput moves with what its neighbours take (other
processes, a hypervisor's steal); the CPU seconds it spent per answered request move
far less, so they show what a change to the request path saves.
"""

from __future__ import annotations

import psutil
from redis.asyncio import Redis


def tree_cpu_seconds(pid: int) -> float | None:
    """User and system CPU seconds of `pid` and every live descendant (None once it is gone)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return None
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:  # a worker that ended meanwhile
            continue
        total += times.user + times.system
    return total


async def redis_cpu_seconds(redis: Redis) -> float:
    """User and system CPU seconds the Redis server has spent since it started (its main
    process: on a machine it shares with the server under test, what a command costs it)."""
    figures = await redis.info("cpu")
    return float(figures["used_cpu_user"]) + float(figures["used_cpu_sys"])
