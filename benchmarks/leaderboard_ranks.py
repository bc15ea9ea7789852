"""Rank lookups on boards of millions: loaded straight into Redis, read the way the API reads them."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

import httpx
from redis.asyncio import Redis
from rich.progress import Progress

from benchmarks.harness import Latency
from mediagraph.ids import to_global_id
from mediagraph.resolvers.leaderboards import store
from mediagraph.resolvers.leaderboards.store import Board

LOAD_CHUNK = 5_000
CHUNKS_PER_ROUND_TRIP = 10
ENTRY = "query($n: String!, $u: ID!) { leaderboard(name: $n) { entry(userId: $u) { rank score } } }"


@dataclass(frozen=True)
class RankFigures:
    members: int
    partitions: int
    bytes_per_member: float
    load_seconds: float
    zrank: Latency
    entry_script: Latency
    top_10: Latency
    graphql_entry: Latency


async def load(redis: Redis, board: Board, size: int, *, seed: int) -> None:
    """`size` members with random scores, in pipelined batches: each partition's entries, users and ready marker."""
    rng = random.Random(seed)
    keys = board.keys
    with Progress(transient=True) as progress:
        task = progress.add_task(f"loading {size:,} members", total=size)
        async with redis.pipeline(transaction=False) as pipe:
            queued = 0
            for start in range(0, size, LOAD_CHUNK):
                by_partition: dict[int, dict[str, float]] = {}
                users: dict[int, dict[Any, Any]] = {}
                for user_id in range(start + 1, min(start + LOAD_CHUNK, size) + 1):
                    score = float(rng.randrange(1_000_000))
                    member = f"{rng.getrandbits(62):016x}:{user_id}"
                    partition = board.partition(score)
                    by_partition.setdefault(partition, {})[member] = board.stored(score)
                    users.setdefault(partition, {})[str(user_id)] = f"1:{member}"
                for partition, members in by_partition.items():
                    part = keys.parts[partition]
                    pipe.zadd(part.entries, members)
                    pipe.hset(part.users, mapping=users[partition])
                    pipe.hincrby(part.users, "n", len(members))
                queued += 1
                if queued == CHUNKS_PER_ROUND_TRIP:
                    await pipe.execute()
                    queued = 0
                progress.update(task, completed=min(start + LOAD_CHUNK, size))
            await pipe.execute()
    for part in keys.parts:
        await redis.set(part.ready, "all")


async def measure(
    redis: Redis, http: httpx.AsyncClient, board: Board, size: int, *, lookups: int, seed: int
) -> RankFigures:
    memory_before = await _settled_memory(redis)
    started = time.perf_counter()
    await load(redis, board, size, seed=seed)
    load_seconds = time.perf_counter() - started
    memory = int((await redis.info("memory"))["used_memory"]) - memory_before
    rng = random.Random(seed + 1)
    users = [rng.randint(1, size) for _ in range(lookups)]
    # What a bare ZRANK needs to be handed: the member and its partition key.
    located = [
        (board.keys.partitions[board.partition(e.score)], store.member_of(e))
        for e in await _entries(redis, board, users)
    ]

    zrank = []
    for key, member in located:
        began = time.perf_counter()
        await redis.zrank(key, member)
        zrank.append(time.perf_counter() - began)
    entry_script = []
    for user_id in users:
        began = time.perf_counter()
        await store.read_entries(redis, board, [user_id])
        entry_script.append(time.perf_counter() - began)
    top = []
    for _ in range(lookups):
        began = time.perf_counter()
        await store.read_range(redis, board, start=0, count=10)
        top.append(time.perf_counter() - began)
    graphql = []
    for user_id in users[: max(lookups // 4, 1)]:
        began = time.perf_counter()
        response = await http.post(
            "/graphql",
            json={"query": ENTRY, "variables": {"n": board.definition.name, "u": to_global_id("User", user_id)}},
        )
        graphql.append(time.perf_counter() - began)
        assert response.json()["data"]["leaderboard"]["entry"] is not None, response.text
    await redis.unlink(*board.keys.script_keys)
    return RankFigures(
        members=size,
        partitions=len(board.keys.partitions),
        bytes_per_member=memory / size,
        load_seconds=load_seconds,
        zrank=Latency.of(zrank),
        entry_script=Latency.of(entry_script),
        top_10=Latency.of(top),
        graphql_entry=Latency.of(graphql),
    )


async def _entries(redis: Redis, board: Board, users: list[int]) -> list[store.RankedEntry]:
    found: list[store.RankedEntry] = []
    for start in range(0, len(users), 500):
        _, chunk = await store.read_entries(redis, board, users[start : start + 500])
        for entry in chunk:
            assert entry is not None
            found.append(entry)
    return found


async def _settled_memory(redis: Redis) -> int:
    """Used memory once Redis has finished freeing what earlier runs unlinked (UNLINK frees lazily)."""
    for _ in range(600):
        info = await redis.info("memory")
        if int(info.get("lazyfree_pending_objects", 0)) == 0:
            return int(info["used_memory"])
        await asyncio.sleep(0.1)
    raise RuntimeError("Redis is still freeing memory after a minute")
