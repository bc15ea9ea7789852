"""Comment thread pages at the first and the N-th page, and statements per request for a page of media.

Keyset pages (`Media.comments(after:)`) seek the (media id, path) index straight to
the cursor, so the N-th page costs what the first does; page-number pages
(`Media.commentPage`) skip rows along the covering index and grow with N. Both are
measured side by side, alternating, through the full GraphQL stack in-process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
from rich.progress import Progress
from sqlalchemy import event, text

from benchmarks.harness import Latency, bench_settings, console, report
from mediagraph import security
from mediagraph.app import create_app
from mediagraph.cursors import encode_cursor
from mediagraph.db.comments.paths import encode_segment
from mediagraph.db.media import Media
from mediagraph.db.users import User
from mediagraph.resolvers.comments.threads import THREAD_CURSOR
from mediagraph.services import Services
from mediagraph.settings import Settings

REPLIES_PER_ROOT = 3
INSERT_CHUNK = 10_000
MEDIA_ON_PAGE = 50

KEYSET = """
query($id: ID!, $first: Int!, $after: String) {
  media(id: $id) { comments(first: $first, after: $after) { edges { node { id content writerNickname depth } } } }
}
"""
NUMBERED = """
query($id: ID!, $page: Int!, $size: Int!) {
  media(id: $id) { commentPage(page: $page, size: $size) { pages hasNextBlock comments { id content writerNickname depth } } }
}
"""
MEDIA_PAGE = """
query($tags: [String!]) {
  mediaList(tags: $tags, first: 50) {
    edges { node { id title commentCount comments(first: 3) { edges { node { id content writerNickname } } } } }
  }
}
"""


def thread_paths(count: int) -> Iterator[str]:
    """A realistic thread in thread order: roots, each followed by its replies."""
    root = 0
    produced = 0
    while produced < count:
        parent = encode_segment(root)
        yield parent
        produced += 1
        for reply in range(min(REPLIES_PER_ROOT, count - produced)):
            yield parent + encode_segment(reply)
            produced += 1
        root += 1


async def seed_thread(services: Services, *, media_id: int, writer_id: int, paths: list[str]) -> None:
    router = services.databases.router
    logical = router.logical_shard(media_id)
    physical = router.physical_shard(media_id)
    with Progress(console=console, disable=len(paths) < INSERT_CHUNK) as progress:
        task = progress.add_task("seeding comments", total=len(paths))
        for start in range(0, len(paths), INSERT_CHUNK):
            chunk = paths[start : start + INSERT_CHUNK]
            async with services.databases.shard_session(physical) as session:
                await session.execute(
                    text(
                        "INSERT INTO comments (media_id, id, logical_shard, path, writer_id, writer_nickname, "
                        "confirmed, content, created_at) SELECT :media, id, :logical, path, :writer, 'Bench', true, "
                        "'comment ' || path, now() FROM unnest(CAST(:ids AS bigint[]), CAST(:paths AS text[])) AS t(id, path)"
                    ),
                    {
                        "media": media_id,
                        "logical": logical,
                        "writer": writer_id,
                        "ids": [services.ids.next_id() for _ in chunk],
                        "paths": chunk,
                    },
                )
                await session.commit()
            progress.advance(task, len(chunk))
    async with services.databases.shard_session(physical) as session:
        await session.execute(
            text("INSERT INTO comment_counts (media_id, logical_shard, comment_count) VALUES (:m, :l, :n)"),
            {"m": media_id, "l": logical, "n": len(paths)},
        )
        await session.commit()
    # Visibility map and statistics, as autovacuum would leave them on a live table.
    async with services.databases.shards[physical].connect() as connection:
        autocommit = await connection.execution_options(isolation_level="AUTOCOMMIT")
        await autocommit.execute(text("VACUUM ANALYZE comments"))


async def seed_rows(services: Services, *, media_count: int, tag: str) -> tuple[User, list[Media]]:
    user = User(
        id=services.ids.next_id(),
        username="bench_writer",
        nickname="Bench",
        password_hash=security.hash_password("x" * 12),
    )
    media = [
        Media(
            id=services.ids.next_id(),
            owner_id=user.id,
            title=f"bench {n}",
            tags=[tag],
            content_type="image/png",
            filename="bench.png",
            size_bytes=1,
            storage_key=f"bench/{n}",
        )
        for n in range(media_count)
    ]
    async with services.databases.main_session() as session:
        session.add(user)
        await session.flush()
        session.add_all(media)
        await session.commit()
    return user, media


class StatementCounter:
    """Statements sent to each database while the block runs."""

    def __init__(self, services: Services) -> None:
        shards = {f"shard {n}": engine for n, engine in enumerate(services.databases.shards)}
        self.engines = {"main": services.databases.main, **shards}
        self.counts = dict.fromkeys(self.engines, 0)
        self.recorders = {name: self._recorder(name) for name in self.engines}

    def _recorder(self, name: str) -> Any:
        def record(*args: Any) -> None:
            self.counts[name] += 1

        return record

    def __enter__(self) -> StatementCounter:
        for name, engine in self.engines.items():
            event.listen(engine.sync_engine, "before_cursor_execute", self.recorders[name])
        return self

    def __exit__(self, *exc: object) -> None:
        for name, engine in self.engines.items():
            event.remove(engine.sync_engine, "before_cursor_execute", self.recorders[name])


async def timed(client: httpx.AsyncClient, query: str, variables: dict[str, Any]) -> float:
    started = time.perf_counter()
    response = await client.post("/graphql", json={"query": query, "variables": variables})
    elapsed = time.perf_counter() - started
    body = response.json()
    if body.get("errors"):
        raise RuntimeError(body["errors"])
    return elapsed


async def measure(settings: Settings, *, pages: int, size: int, requests: int) -> None:
    from mediagraph.ids import to_global_id

    application = create_app(settings)
    async with application.router.lifespan_context(application):
        services: Services = application.state.services
        user, media = await seed_rows(services, media_count=MEDIA_ON_PAGE, tag="benchpage")
        thread_media = media[0]
        paths = list(thread_paths(pages * size))
        await seed_thread(services, media_id=thread_media.id, writer_id=user.id, paths=paths)
        for item in media[1:]:
            await seed_thread(services, media_id=item.id, writer_id=user.id, paths=list(thread_paths(5)))
        media_gid = to_global_id("Media", thread_media.id)
        deep_cursor = encode_cursor(
            settings.secret_key, THREAD_CURSOR, [thread_media.id, paths[(pages - 1) * size - 1]]
        )
        variants: dict[str, tuple[str, dict[str, Any]]] = {
            "keyset, page 1": (KEYSET, {"id": media_gid, "first": size, "after": None}),
            f"keyset, page {pages:,}": (KEYSET, {"id": media_gid, "first": size, "after": deep_cursor}),
            "numbered, page 1": (NUMBERED, {"id": media_gid, "page": 1, "size": size}),
            f"numbered, page {pages:,}": (NUMBERED, {"id": media_gid, "page": pages, "size": size}),
            "50-media page": (MEDIA_PAGE, {"tags": ["benchpage"]}),
        }
        transport = httpx.ASGITransport(app=application)
        samples: dict[str, list[float]] = {name: [] for name in variants}
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            for query, variables in variants.values():  # warm caches and pools
                await timed(client, query, variables)
            with Progress(console=console) as progress:
                task = progress.add_task("measuring", total=requests)
                for _ in range(requests):
                    for name, (query, variables) in variants.items():
                        samples[name].append(await timed(client, query, variables))
                    progress.advance(task)
            with StatementCounter(services) as counter:
                await timed(client, MEDIA_PAGE, {"tags": ["benchpage"]})
        latencies = {name: Latency.of(values) for name, values in samples.items()}
        names = list(variants)
        report(
            f"comment thread pages ({pages * size:,} comments, {size} a page, {requests} requests each)",
            ["request", "p50 ms", "p99 ms", "mean ms"],
            [(name, lat.p50, lat.p99, lat.mean) for name, lat in latencies.items()],
        )
        report(
            "page N against page 1 (p50 ratio)",
            ["pagination", "ratio"],
            [
                ("keyset (Media.comments after:)", latencies[names[1]].p50 / latencies[names[0]].p50),
                ("page number (Media.commentPage)", latencies[names[3]].p50 / latencies[names[2]].p50),
            ],
        )
        shard_statements = sum(count for name, count in counter.counts.items() if name != "main")
        report(
            f"statements for one page of {MEDIA_ON_PAGE} media with commentCount and comments(first: 3)",
            ["database", "statements"],
            [
                *counter.counts.items(),
                ("total", sum(counter.counts.values())),
                ("per media on shards", shard_statements / MEDIA_ON_PAGE),
            ],
        )


def run(*, pages: int, size: int, requests: int) -> None:
    with bench_settings("comments") as settings:
        asyncio.run(measure(settings, pages=pages, size=size, requests=requests))
