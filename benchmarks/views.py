"""`mediagraph bench views`: recordView throughput, flush rate, and viewCount push latency.

recordView is measured side by side with a plain `media(id:)` query over the same
connections in alternating rounds, so the ratio holds on a busy machine. Push latency
is the time from sending a view to each subscriber receiving the new count.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import websockets

from benchmarks.harness import LOOPBACK_CLIENTS, Latency, Load, bench_settings, bulk_media, console, post_load, report
from benchmarks.servers import live_server
from mediagraph.cli.runtime import open_services
from mediagraph.dataloaders.views import live_view_totals
from mediagraph.db.endpoints import configured_endpoints
from mediagraph.ids import to_global_id
from mediagraph.services import Services
from mediagraph.settings import Settings
from mediagraph.workers import views as worker

RECORD_VIEW = "mutation($id: ID!) { recordView(mediaId: $id) { counted } }"
BY_ID = "query($id: ID!) { media(id: $id) { id title } }"
VIEW_COUNT = "subscription($id: ID!) { viewCount(mediaId: $id) { viewCount } }"
ROUNDS = 4


def run(*, views: int, media: int, concurrency: int, subscribers: int, pushes: int) -> None:
    with bench_settings("views", max_connections_per_address=LOOPBACK_CLIENTS) as settings:
        asyncio.run(_bench(settings, views=views, media=media, concurrency=concurrency))
        asyncio.run(_bench_pushes(settings, subscribers=subscribers, pushes=pushes))


def run_cluster(*, views: int, media: int, concurrency: int) -> None:
    """recordView on one Redis, then on a 3-master Redis Cluster started for the run, side by side."""
    from tests.support.redis_cluster import RedisClusterServers

    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory(prefix="mgbench-cluster-") as folder:
        cluster = RedisClusterServers(Path(folder)).start()
        try:
            targets: list[tuple[str, dict[str, object]]] = [
                ("one Redis", {}),
                ("Redis Cluster, 3 masters", {"redis_url": cluster.url, "redis_cluster": True}),
            ]
            for label, overrides in targets:
                console.print(f"[bold]{label}[/bold]")
                with bench_settings("views", max_connections_per_address=LOOPBACK_CLIENTS, **overrides) as settings:
                    recorded, baseline, nodes = asyncio.run(
                        _bench(settings, views=views, media=media, concurrency=concurrency)
                    )
                rows.append([label, recorded, baseline, recorded / baseline, nodes])
        finally:
            cluster.stop()
    report(
        f"recordView on one Redis and on a Redis Cluster, {concurrency} connections",
        ["redis", "recordView/s", "media(id:)/s (same run)", "ratio", "view keys per node"],
        rows,
    )


async def _bench(settings: Settings, *, views: int, media: int, concurrency: int) -> tuple[float, float, str]:
    async with open_services(settings, configured_endpoints(settings)) as services:
        console.print(f"loading {media:,} media …")
        media_ids = await bulk_media(services, media)
        global_ids = [to_global_id("Media", media_id) for media_id in media_ids]
        with live_server(settings) as base:
            recorded, baseline = await _alternate(base, global_ids, views=views, concurrency=concurrency)
        counted = sum((await live_view_totals(services, media_ids)).values())
        nodes = await _keys_per_node(services, settings)
        started = time.perf_counter()
        flushed = await worker.flush(services)
        flush_seconds = time.perf_counter() - started
    if counted != len(recorded.latencies) - recorded.errors or flushed != counted:
        raise SystemExit(f"views went missing: {counted} counted, {flushed} flushed")
    view_latency, read_latency = Latency.of(recorded.latencies), Latency.of(baseline.latencies)
    report(
        f"recordView through GraphQL, {concurrency} connections, {len(recorded.latencies):,} distinct viewers",
        ["operation", "requests/s", "p50 ms", "p99 ms", "errors"],
        [
            ["recordView", recorded.per_second, view_latency.p50, view_latency.p99, recorded.errors],
            ["media(id:) (same run)", baseline.per_second, read_latency.p50, read_latency.p99, baseline.errors],
            ["ratio recordView / media(id:)", recorded.per_second / baseline.per_second, "", "", ""],
        ],
    )
    report(
        "flush of the counted views into PostgreSQL",
        ["views", "media", "seconds", "views/s"],
        [[flushed, media, flush_seconds, flushed / flush_seconds]],
    )
    return recorded.per_second, baseline.per_second, nodes


async def _keys_per_node(services: Services, settings: Settings) -> str:
    """How the view keys (pending counts, dedupe keys) spread over the Redis nodes."""
    redis: Any = services.redis
    placed: Counter[str] = Counter()
    async for key in redis.scan_iter(match=f"{settings.redis_prefix}views:*", count=1000):
        node = redis.get_node_from_key(key) if settings.redis_cluster else None
        placed[node.name if node is not None else "one"] += 1
    return ", ".join(f"{count:,}" for _, count in sorted(placed.items()))


async def _alternate(base: str, global_ids: list[str], *, views: int, concurrency: int) -> tuple[Load, Load]:
    recorded, baseline = Load([], 0, 0.0), Load([], 0, 0.0)
    per_round = views // ROUNDS
    for round_number in range(ROUNDS):
        requests = [
            (
                orjson.dumps({"query": kind, "variables": {"id": global_ids[n % len(global_ids)]}}),
                {"user-agent": f"bench-viewer-{round_number}-{n}"},
            )
            for kind in (RECORD_VIEW, BY_ID)
            for n in range(per_round)
        ]
        for load, batch in ((recorded, requests[:per_round]), (baseline, requests[per_round:])):
            measured = await post_load(base, batch, concurrency=concurrency)
            load.latencies += measured.latencies
            load.errors += measured.errors
            load.seconds += measured.seconds
    return recorded, baseline


async def _bench_pushes(settings: Settings, *, subscribers: int, pushes: int) -> None:
    async with open_services(settings, configured_endpoints(settings)) as services:
        (media_id,) = await bulk_media(services, 1)
        global_id = to_global_id("Media", media_id)
        with live_server(settings) as base:
            delays, view_seconds = await _push_delays(services, base, global_id, subscribers, pushes)
    push, view = Latency.of(delays), Latency.of(view_seconds)
    report(
        f"viewCount push latency: {subscribers} subscribers on one server, {pushes} views spaced out",
        ["measure", "p50 ms", "p99 ms", "samples"],
        [
            ["view sent → push received", push.p50, push.p99, push.count],
            ["recordView response (same views)", view.p50, view.p99, view.count],
            ["ratio push p50 / response p50", push.p50 / view.p50 if view.p50 else 0.0, "", ""],
        ],
    )


async def _push_delays(
    services: Services, base: str, global_id: str, subscribers: int, pushes: int
) -> tuple[list[float], list[float]]:
    url = base.replace("http://", "ws://") + "/graphql"
    sockets = [await _subscribe(url, global_id) for _ in range(subscribers)]
    arrivals: dict[int, list[float]] = {n: [] for n in range(1, pushes + 1)}
    all_arrived = asyncio.Event()

    async def listen(socket: websockets.ClientConnection) -> None:
        while True:
            message = orjson.loads(await socket.recv())
            if message.get("type") == "next":
                count = message["payload"]["data"]["viewCount"]["viewCount"]
                if count in arrivals:
                    arrivals[count].append(time.perf_counter())
                    if sum(map(len, arrivals.values())) == subscribers * pushes:
                        all_arrived.set()

    listeners = [asyncio.create_task(listen(socket)) for socket in sockets]
    sent: dict[int, float] = {}
    view_seconds = []
    body = {"query": RECORD_VIEW, "variables": {"id": global_id}}
    try:
        for n in range(1, pushes + 1):
            # Spaced beyond the push interval, so every view is announced on its own.
            await asyncio.sleep(services.settings.view_push_interval_seconds * 2)
            sent[n] = time.perf_counter()
            view = await post_load(base, [(orjson.dumps(body), {"user-agent": f"push-viewer-{n}"})], concurrency=1)
            view_seconds += view.latencies
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_arrived.wait(), 10)
    finally:
        for task in listeners:
            task.cancel()
        for socket in sockets:
            await socket.close()
    return [at - sent[n] for n, times in arrivals.items() for at in times], view_seconds


async def _subscribe(url: str, global_id: str) -> websockets.ClientConnection:
    socket = await websockets.connect(url, subprotocols=[websockets.Subprotocol("graphql-transport-ws")])
    await socket.send(orjson.dumps({"type": "connection_init", "payload": {}}).decode())
    await socket.recv()
    subscribe = {"id": "1", "type": "subscribe", "payload": {"query": VIEW_COUNT, "variables": {"id": global_id}}}
    await socket.send(orjson.dumps(subscribe).decode())
    await socket.recv()  # the count as it stands
    return socket
