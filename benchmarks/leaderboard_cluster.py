"""`mediagraph bench leaderboard --cluster`: submitScore on one Redis and on a 3-master Redis Cluster.

Both run in one invocation, one after the other, against one `mediagraph serve` process
each, so their ratio is measured under the same conditions. The cluster is three masters
of Debian's `redis-server` 7 on loopback ports, started for the run (the test suite's
launcher, tests/support/redis_cluster.py). The board has five score-range partitions,
each in a slot of its own; the run reports which node holds each of its keys.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness import LOOPBACK_CLIENTS, bench_settings, console, report
from benchmarks.leaderboard import HTTP_TIMEOUT_SECONDS, _insert_users
from benchmarks.leaderboard_servers import servers
from benchmarks.leaderboard_submit import Throughput, throughput
from mediagraph import security
from mediagraph.cli.runtime import open_services
from mediagraph.db.endpoints import Endpoints
from mediagraph.settings import Settings
from tests.support.redis_cluster import RedisClusterServers

PARTITIONS = 5


@dataclass(frozen=True)
class Side:
    redis: str
    rows: list[Throughput]
    keys_per_node: dict[str, int]


def run_cluster(*, submissions: int, concurrency: int) -> None:
    sides: list[Side] = []
    with tempfile.TemporaryDirectory(prefix="mgbench-cluster-") as folder:
        cluster = RedisClusterServers(Path(folder)).start()
        try:
            targets: list[tuple[str, dict[str, Any]]] = [
                ("one Redis", {}),
                ("Redis Cluster, 3 masters", {"redis_url": cluster.url, "redis_cluster": True}),
            ]
            for label, overrides in targets:
                console.print(f"[bold]{label}[/bold]")
                with (
                    bench_settings("lbcluster", max_connections_per_address=LOOPBACK_CLIENTS, **overrides) as settings,
                    servers(settings, 1) as urls,
                ):
                    sides.append(asyncio.run(_side(label, settings, urls, submissions, concurrency)))
        finally:
            cluster.stop()
    single, clustered = sides
    report(
        f"Score submissions through GraphQL, one API process, {concurrency} concurrent clients, "
        f"{PARTITIONS} partitions",
        ["mutation", "one Redis updates/s", "cluster updates/s", "cluster / one", "cluster p50 / p99 ms", "failed"],
        [
            [
                one.mutation,
                one.updates_per_second,
                many.updates_per_second,
                many.updates_per_second / one.updates_per_second,
                f"{many.latency.p50:.2f} / {many.latency.p99:.2f}",
                one.failed + many.failed,
            ]
            for one, many in zip(single.rows, clustered.rows, strict=True)
        ],
    )
    report(
        "Where the boards' keys landed (keys per node)",
        ["redis", "node", "keys"],
        [[side.redis, node, count] for side in sides for node, count in sorted(side.keys_per_node.items())],
    )


async def _side(label: str, settings: Settings, urls: list[str], submissions: int, concurrency: int) -> Side:
    endpoints = Endpoints(settings.database_url, tuple(settings.shard_urls), settings.redis_url)
    token = security.issue_token(settings, user_id=1, role=security.SERVICE_ROLE, token_version=0)
    top = float(submissions + 1_000)
    bounds = [top * n / PARTITIONS for n in range(1, PARTITIONS)]
    async with (
        open_services(settings, endpoints) as services,
        httpx.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=HTTP_TIMEOUT_SECONDS) as http,
    ):
        users = await _insert_users(services, 1_000)
        rows = [
            await throughput(
                http,
                urls,
                users,
                board=f"cluster-{batch}",
                submissions=submissions,
                concurrency=concurrency,
                batch=batch,
                bounds=bounds,
            )
            for batch in (1, 100)
        ]
        placed: Counter[str] = Counter()
        redis: Any = services.redis
        async for key in redis.scan_iter(match=f"{settings.redis_prefix}lb:*", count=1000):
            node = redis.get_node_from_key(key) if settings.redis_cluster else None
            placed[node.name if node is not None else settings.redis_url] += 1
    return Side(label, rows, dict(placed))
