"""`mediagraph bench playback`: heartbeats per second through GraphQL.

One run measures, side by side on the same data:
- heartbeats as players send them, over HTTP to a real `mediagraph serve` process
  (GraphQL, the media lookup, the session claim and the counting script): first
  heartbeats of new sessions, then steady ones of sessions already counted;
- the same two kinds through the Redis steps alone (claim and counting script, in
  this process), so the ratio shows what the API around them costs; and once more with
  the batches sent through redis-py's pipeline instead of `redis_pool.execute_batch`, with
  this process's CPU per heartbeat beside each (what the batch's round trip saves);
- the roll-up copying the resulting counters into PostgreSQL.

Each run also reports the CPU Redis spent per heartbeat: on a machine Redis shares with
the server, its counting script takes cores the requests would otherwise have.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import httpx
from redis.asyncio import Redis
from sqlmodel import col, select

from benchmarks.cpu import redis_cpu_seconds
from benchmarks.harness import WORK_DIR, Latency, bench_settings, bulk_media, console, report
from benchmarks.servers import mediagraph_server
from mediagraph.db.endpoints import Endpoints
from mediagraph.db.media import Media
from mediagraph.ids import to_global_id
from mediagraph.keys.playback import Entity, dirty_index_key, dirty_key, to_ms
from mediagraph.keys.playback.scripts import Heartbeat, PlaybackScripts
from mediagraph.lua import batch_by_pipeline
from mediagraph.redis_pool import redis_client
from mediagraph.services import Services
from mediagraph.settings import Settings
from mediagraph.workers.playback import roll_up_once

CHANNELS = 4
REDIS_STEPS = "Redis steps"
BY_PIPELINE = "Redis steps by redis-py's pipeline"

REPORT = """
mutation($session: UUID!, $media: ID!) {
  reportPlayback(sessionId: $session, mediaId: $media) { counted concurrent }
}
"""


@dataclass(frozen=True)
class Run:
    name: str
    seconds: float
    latency: Latency
    redis_cpu_seconds: float
    # This process's CPU: for the Redis steps, what sending them costs a server.
    client_cpu_seconds: float = 0.0

    @property
    def client_cpu_us(self) -> float:
        return self.client_cpu_seconds * 1e6 / self.latency.count if self.latency.count else 0.0

    @property
    def redis_cpu_us(self) -> float:
        """Redis's CPU per heartbeat, in microseconds."""
        return self.redis_cpu_seconds * 1e6 / self.latency.count if self.latency.count else 0.0

    @property
    def rate(self) -> float:
        return self.latency.count / self.seconds if self.seconds else 0.0


def run(*, heartbeats: int, concurrency: int, media: int, rounds: int) -> None:
    with bench_settings("playback", playback_new_sessions_per_minute=1_000_000_000) as settings:
        asyncio.run(_prepare(settings, media=media))
        with _server(settings) as base_url:
            runs, rolled = asyncio.run(
                _measure(settings, base_url, heartbeats=heartbeats, concurrency=concurrency, rounds=rounds)
            )
    report(
        f"Playback heartbeats: median of {rounds} rounds of {heartbeats:,} ({concurrency} concurrent, {media} media)",
        ["path", "heartbeats/s", "p50 ms", "p99 ms", "Redis CPU µs/heartbeat", "this process's CPU µs/heartbeat"],
        [
            (
                r.name,
                r.rate,
                r.latency.p50,
                r.latency.p99,
                r.redis_cpu_us,
                r.client_cpu_us if r.name.startswith(REDIS_STEPS) else "—",
            )
            for r in runs
        ],
    )
    counters, seconds = rolled
    report("Roll-up into PostgreSQL", ["counters", "seconds", "counters/s"], [(counters, seconds, counters / seconds)])
    by_name = {r.name: r for r in runs}
    report(
        "Ratios",
        ["comparison", "ratio"],
        [
            (
                "GraphQL / Redis steps, new sessions",
                _ratio(by_name, "GraphQL, new sessions", "Redis steps, new sessions"),
            ),
            ("GraphQL / Redis steps, steady", _ratio(by_name, "GraphQL, steady", "Redis steps, steady")),
            ("GraphQL steady / GraphQL new sessions", _ratio(by_name, "GraphQL, steady", "GraphQL, new sessions")),
            (
                "this process's CPU per steady heartbeat, execute_batch / redis-py pipeline",
                _cpu_ratio(by_name, f"{REDIS_STEPS}, steady", f"{BY_PIPELINE}, steady"),
            ),
        ],
    )


def _cpu_ratio(runs: dict[str, Run], numerator: str, denominator: str) -> float:
    return runs[numerator].client_cpu_us / runs[denominator].client_cpu_us if runs[denominator].client_cpu_us else 0.0


def _ratio(runs: dict[str, Run], numerator: str, denominator: str) -> float:
    return runs[numerator].rate / runs[denominator].rate if runs[denominator].rate else 0.0


def _endpoints(settings: Settings) -> Endpoints:
    return Endpoints(settings.database_url, tuple(settings.shard_urls), settings.redis_url)


async def _prepare(settings: Settings, *, media: int) -> None:
    services = await Services.open(settings, _endpoints(settings))
    try:
        # Four channels (uploaders) sharing the streams.
        for channel in range(CHANNELS):
            await bulk_media(services, media // CHANNELS + (channel < media % CHANNELS))
    finally:
        await services.close()


@contextmanager
def _server(settings: Settings) -> Iterator[str]:
    log = WORK_DIR / f"playback-server-{uuid.uuid4().hex[:6]}.log"
    with mediagraph_server(settings.model_copy(update={"node_id": 1}), serve_options=["--no-workers"], log=log) as base:
        yield base


async def _measure(
    settings: Settings, base_url: str, *, heartbeats: int, concurrency: int, rounds: int
) -> tuple[list[Run], tuple[int, float]]:
    services = await Services.open(settings, _endpoints(settings))
    try:
        async with services.databases.main_session() as session:
            rows = (await session.execute(select(col(Media.id), col(Media.owner_id)).order_by(col(Media.id)))).all()
        streams = [Entity.stream(media_id, owner_id) for media_id, owner_id in rows]
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60) as http:
            # The same steps on a client of their own whose batches go through redis-py's pipeline.
            by_pipeline = redis_client(settings.redis_url, max_connections=concurrency)
            batch_by_pipeline(by_pipeline)
            paths = {
                "GraphQL": _graphql_beat(http),
                REDIS_STEPS: _direct_beat(services, services.redis),
                BY_PIPELINE: _direct_beat(services, by_pipeline),
            }
            measured: dict[str, list[Run]] = {}
            try:
                # The paths take turns, round after round, so a busy spell on a shared
                # machine lands on all of them rather than on one.
                for round_number in range(1, rounds + 1):
                    console.print(f"round {round_number} of {rounds}")
                    for name, beat in paths.items():
                        sessions = [(str(uuid.uuid4()), streams[n % len(streams)]) for n in range(heartbeats)]
                        for kind in ("new sessions", "steady"):
                            run = await _timed(f"{name}, {kind}", sessions, beat, concurrency, services)
                            measured.setdefault(run.name, []).append(run)
            finally:
                await by_pipeline.aclose()
        runs = [sorted(results, key=lambda run: run.rate)[len(results) // 2] for results in measured.values()]
        return runs, await _timed_roll_up(services)
    finally:
        await services.close()


Beat = Callable[[str, Entity], Awaitable[None]]


def _graphql_beat(http: httpx.AsyncClient) -> Beat:
    async def beat(session: str, stream: Entity) -> None:
        variables = {"session": session, "media": to_global_id("Media", stream.id)}
        response = await http.post("/graphql", json={"query": REPORT, "variables": variables})
        body = response.json()
        if body.get("errors"):
            raise RuntimeError(body["errors"])

    return beat


def _direct_beat(services: Services, redis: Redis) -> Beat:
    scripts = PlaybackScripts(redis, services.keys)
    settings = services.settings

    async def beat(session: str, stream: Entity) -> None:
        now_ms = to_ms(services.clock())
        ttl = settings.playback_session_idle_hours * 3600
        if await scripts.claimed_channel(session, stream.id, ttl) is None:
            await scripts.claim(session, stream.id, ttl, channel_id=stream.channel)
        await scripts.heartbeat(
            Heartbeat(session, stream, "127.0.0.1", now_ms, now_ms, services.ids.next_id()),
            live_window_ms=settings.playback_live_window_seconds * 1000,
            session_ttl_seconds=settings.playback_session_idle_hours * 3600,
            churn_limit=settings.playback_new_sessions_per_minute,
        )

    return beat


async def _timed(
    name: str, beats: Sequence[tuple[str, Entity]], beat: Beat, concurrency: int, services: Services
) -> Run:
    console.print(f"{name}: {len(beats):,} heartbeats")
    durations: list[float] = []
    queue = iter(beats)

    async def player() -> None:
        for session, stream in queue:
            started = time.perf_counter()
            await beat(session, stream)
            durations.append(time.perf_counter() - started)

    redis_before = await redis_cpu_seconds(services.redis)
    started, cpu_started = time.perf_counter(), time.process_time()
    await asyncio.gather(*(player() for _ in range(concurrency)))
    seconds, cpu_spent = time.perf_counter() - started, time.process_time() - cpu_started
    redis_spent = await redis_cpu_seconds(services.redis) - redis_before
    return Run(name, seconds, Latency.of(durations), redis_spent, cpu_spent)


async def _timed_roll_up(services: Services) -> tuple[int, float]:
    """How many counters the roll-up copied, and in how many seconds."""
    redis, keys = services.redis, services.keys
    members = cast(list[bytes], await redis.zrange(dirty_index_key(keys), 0, -1))
    channels = [int(member) for member in members]
    counters = sum([int(await redis.scard(dirty_key(keys, channel))) for channel in channels])
    console.print(f"roll-up: {counters:,} counters of {len(channels)} channels")
    started = time.perf_counter()
    while await roll_up_once(services):
        pass
    return counters, time.perf_counter() - started
