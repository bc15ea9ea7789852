"""What every benchmark needs: its own databases and key prefix, live servers, and a report.

A benchmark never touches the data of a running `serve`: it creates uniquely named
databases (and a Redis prefix) on the configured or embedded servers and drops them
when it ends, exactly as the test suite does.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sqlalchemy.engine import make_url

from mediagraph.db.endpoints import Endpoints, async_url
from mediagraph.db.provision import drop_database, provision
from mediagraph.embedded import resolve_endpoints
from mediagraph.services import Services
from mediagraph.settings import Settings, get_settings

# Piped output (a log, a script reading the ratio table) gets rows wide enough not to wrap.
console = Console() if sys.stdout.isatty() else Console(width=160)

WORK_DIR = Path(__file__).parent / ".work"
# Every benchmark client connects from loopback: past the per-address websocket limit of a
# real deployment, so subscription benchmarks raise it for their servers.
LOOPBACK_CLIENTS = 1_000_000


@contextlib.contextmanager
def bench_settings(name: str, **overrides: object) -> Iterator[Settings]:
    """Settings pointing at fresh databases and a fresh Redis prefix, removed afterwards."""
    base = get_settings()
    endpoints, embedded = resolve_endpoints(base)
    run_id = uuid.uuid4().hex[:8]
    server = make_url(async_url(endpoints.database_url))
    main = server.set(database=f"mgbench_{name}_{run_id}").render_as_string(hide_password=False)
    shards = tuple(
        server.set(database=f"mgbench_{name}_{run_id}_shard_{n}").render_as_string(hide_password=False)
        for n in range(max(len(endpoints.shard_urls), 2))
    )
    resolved = Endpoints(main, shards, endpoints.redis_url)
    data_dir = WORK_DIR / f"{name}-{run_id}"
    try:
        asyncio.run(provision(resolved, logical_shards=base.logical_shards))
        yield base.model_copy(
            update={
                "database_url": main,
                "shard_urls": list(shards),
                "redis_url": endpoints.redis_url,
                "redis_prefix": f"mgbench:{name}:{run_id}:",
                "data_dir": data_dir,
                "run_workers": False,
                **overrides,
            }
        )
    finally:
        for url in (main, *shards):
            asyncio.run(drop_database(url))
        asyncio.run(_drop_prefix(endpoints.redis_url, f"mgbench:{name}:{run_id}:"))
        if embedded is not None:
            embedded.stop()


async def _drop_prefix(redis_url: str, prefix: str) -> None:
    from redis.asyncio import Redis

    redis = Redis.from_url(redis_url)
    try:
        async for key in redis.scan_iter(match=f"{prefix}*", count=1000):
            await redis.delete(key)
    finally:
        await redis.aclose()


@dataclass(frozen=True)
class Latency:
    """Percentiles of a sample of durations, in milliseconds."""

    p50: float
    p99: float
    mean: float
    count: int

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency:
        ordered = sorted(seconds)
        if not ordered:
            return cls(0.0, 0.0, 0.0, 0)

        def at(fraction: float) -> float:
            return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000

        return cls(at(0.50), at(0.99), statistics.fmean(ordered) * 1000, len(ordered))


def report(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(_cell(value) for value in row))
    console.print(table)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


@dataclass
class Load:
    """What a run of `post_load` measured: per-request latencies, failures, wall time."""

    latencies: list[float]
    errors: int
    seconds: float

    @property
    def per_second(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0


async def post_load(
    base: str, requests: Sequence[tuple[bytes, dict[str, str]]], *, concurrency: int, path: str = "/graphql"
) -> Load:
    """POST each (JSON body, headers) over `concurrency` keep-alive connections, as fast as they answer.

    A raw HTTP/1.1 client: httpx would spend more CPU than the server on this 2-core
    machine. A response with `errors` in its body counts as a failure.
    """
    import time
    from urllib.parse import urlsplit

    parts = urlsplit(base)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    latencies: list[float] = []
    errors = 0
    queue = iter(requests)

    async def connection() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, port)
        try:
            for body, headers in queue:
                extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
                head = (
                    f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n{extra}\r\n"
                )
                started = time.perf_counter()
                writer.write(head.encode() + body)
                response_head = await reader.readuntil(b"\r\n\r\n")
                length = int(response_head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                payload = await reader.readexactly(length)
                latencies.append(time.perf_counter() - started)
                if not response_head.startswith(b"HTTP/1.1 200") or b'"errors"' in payload:
                    errors += 1
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(connection() for _ in range(concurrency)))
    return Load(latencies, errors, time.perf_counter() - started)


async def bulk_media(services: Services, count: int, *, chunk: int = 50_000) -> list[int]:
    """`count` media rows (no files behind them) owned by one new user, inserted in bulk; their ids."""
    from sqlalchemy import text

    from mediagraph.db.users import User

    owner = User(
        id=services.ids.next_id(), username=f"bench_{uuid.uuid4().hex[:12]}", nickname="Bench", password_hash="-"
    )
    async with services.databases.main_session() as session:
        session.add(owner)
        await session.commit()
    ids = [services.ids.next_id() for _ in range(count)]
    for start in range(0, count, chunk):
        async with services.databases.main_session() as session:
            await session.execute(
                text(
                    "INSERT INTO media (id, owner_id, title, description, tags, content_type, filename, "
                    "size_bytes, storage_key, view_count, created_at, updated_at) "
                    "SELECT i, :owner, 'Bench ' || i, '', ARRAY[]::varchar[], 'image/png', 'bench.png', 0, "
                    "'bench/' || i, 0, now(), now() FROM unnest(CAST(:ids AS bigint[])) AS i"
                ),
                {"owner": owner.id, "ids": ids[start : start + chunk]},
            )
            await session.commit()
    return ids
