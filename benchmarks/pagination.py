"""`mediagraph bench pagination`: the VIEWS sort's first page, page 2 and page 10,000 side by side.

The deep session is built in bulk SQL (what 9,999 pages would have stored), then every
page is a real GraphQL request to a running server. Between the cursors' pages and the
measurement, `changes` media get new view counts through a real sync, so each request's
omitted-item detection has the same work to do however deep its cursor is. The seed's
detection query (every media above the cursor, minus the served ones) is timed at the
same two depths for contrast.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import orjson
from sqlalchemy import text

from benchmarks.harness import Latency, Load, bench_settings, bulk_media, console, post_load, report
from benchmarks.servers import live_server
from mediagraph.cli.runtime import open_services
from mediagraph.db.endpoints import configured_endpoints
from mediagraph.db.rows import Where
from mediagraph.db.views import pages
from mediagraph.keys.paging import Candidates, PageSessions
from mediagraph.resolvers.media import TagMatch
from mediagraph.resolvers.views.pagination import OMITTED_SCAN, MediaSort, SessionCursor, filter_signature
from mediagraph.services import Services
from mediagraph.settings import Settings
from mediagraph.workers import views as worker

RANKED = """
query($first: Int, $after: String) { mediaList(sort: VIEWS, first: $first, after: $after) {
  edges { cursor node { id title } } omitted { id } pageInfo { hasNextPage endCursor } } }
"""
# The seed's detection reads every media above the cursor (to subtract the served ones).
SEED_DETECTION = text("SELECT m.id FROM media m WHERE (m.view_count, m.id) > (:count, :id)")
REPEATS = 5


def run(*, media: int, page_size: int, depth: int, changes: int, rounds: int) -> None:
    if media < page_size * depth:
        raise SystemExit(f"page {depth} of {page_size} needs at least {page_size * depth:,} media")
    with bench_settings("pagination") as settings:
        asyncio.run(_bench(settings, media=media, page_size=page_size, depth=depth, changes=changes, rounds=rounds))


async def _bench(settings: Settings, *, media: int, page_size: int, depth: int, changes: int, rounds: int) -> None:
    rng = random.Random(1)
    async with open_services(settings, configured_endpoints(settings)) as services:
        console.print(f"loading {media:,} media with view counts …")
        ids = await bulk_media(services, media)
        await _add_views(services, ids, rng, high=1_000_000)
        deep = await _deep_cursor(services, served=page_size * (depth - 1))
        with live_server(settings) as base:
            first_page = _body(page_size, None)
            page_one = orjson.loads((await _post(base, first_page)).decode())["data"]["mediaList"]
            second_page = _body(page_size, page_one["pageInfo"]["endCursor"])
            deep_page = _body(page_size, deep.encode(settings.secret_key, MediaSort.VIEWS))
            # Counts move after the cursors were handed out: both must look for omitted items.
            await _add_views(services, rng.sample(ids, changes), rng, high=2_000_000)
            samples = await _alternate(base, {"first": first_page, "2": second_page, "deep": deep_page}, rounds)
        shallow = SessionCursor.decode(settings.secret_key, MediaSort.VIEWS, page_one["pageInfo"]["endCursor"])
        detection = await _detection_sql(services, {"2": shallow, "deep": deep}, rounds)
    _report(samples, detection, depth=depth, changes=changes, page_size=page_size)


def _body(first: int, after: str | None) -> bytes:
    return orjson.dumps({"query": RANKED, "variables": {"first": first, "after": after}})


async def _post(base: str, body: bytes) -> bytes:
    import httpx

    async with httpx.AsyncClient(base_url=base) as client:
        return (await client.post("/graphql", content=body, headers={"content-type": "application/json"})).content


async def _add_views(services: Services, media_ids: list[int], rng: random.Random, *, high: int) -> None:
    """Give media view counts the way flushes do (durable count plus a change row), then sync."""
    counts = [rng.randrange(high) for _ in media_ids]
    async with services.databases.main_session() as session:
        await session.execute(
            text(
                "WITH v AS (SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:counts AS bigint[])) AS v(id, n)), "
                "c AS (INSERT INTO media_view_count AS c (media_id, view_count) SELECT id, n FROM v "
                "ON CONFLICT (media_id) DO UPDATE SET view_count = c.view_count + excluded.view_count "
                "RETURNING media_id) "
                "INSERT INTO media_count_changes (media_id) SELECT media_id FROM c"
            ),
            {"ids": media_ids, "counts": counts},
        )
        await session.commit()
    await worker.sync(services)
    async with services.databases.main_session() as session:
        await session.execute(text("ANALYZE media"))
        await session.commit()


async def _deep_cursor(services: Services, *, served: int) -> SessionCursor:
    """A session that has been served the top `served` media, and the cursor at its last one."""
    session_id = services.ids.next_id()
    async with services.databases.main_session() as session:
        top = (
            await session.execute(
                text("SELECT id, view_count FROM media ORDER BY view_count DESC, id DESC LIMIT :served"),
                {"served": served},
            )
        ).all()
        generation = await session.scalar(text("SELECT generation FROM media_sort_generation"))
    signature = filter_signature(None, TagMatch.ALL)
    sessions = PageSessions(services.redis, services.keys, ttl_seconds=services.settings.page_session_ttl_seconds)
    key = sessions.delivered_key(session_id, MediaSort.VIEWS.value, signature)
    # What paging that deep would have stored, in steps of 10,000 (one script call each).
    for start in range(0, served, 10_000):
        chunk = [row[0] for row in top[start : start + 10_000]]
        await sessions.step(
            key,
            rewind=None,
            next_number=start,
            inline=chunk if start == 0 else (),
            lists=[] if start == 0 else [Candidates(chunk, want=len(chunk), record=len(chunk))],
        )
    media_id, count = top[-1]
    return SessionCursor(session_id, served, int(generation or 0), count, media_id, signature)


async def _alternate(base: str, bodies: dict[str, bytes], rounds: int) -> dict[str, Load]:
    loads = {name: Load([], 0, 0.0) for name in bodies}
    for _ in range(rounds):
        for name, body in bodies.items():
            measured = await post_load(base, [(body, {})] * REPEATS, concurrency=1)
            loads[name].latencies += measured.latencies
            loads[name].errors += measured.errors
            loads[name].seconds += measured.seconds
    return loads


async def _detection_sql(services: Services, cursors: dict[str, SessionCursor], rounds: int) -> dict[str, Any]:
    """Milliseconds per run of each detection read, at each depth: the whole later-page statement
    (page, changed media above the cursor, generation) against the seed's read of every media above it."""
    timings: dict[str, Any] = {}
    reads = services.databases.main_reads
    async with services.databases.main_session() as session:
        for name, cursor in cursors.items():
            seed = {"count": cursor.count, "id": cursor.media_id}
            for label in ("generation", "seed"):
                seconds = []
                for _ in range(rounds):
                    started = time.perf_counter()
                    if label == "seed":
                        await session.execute(SEED_DETECTION, seed)
                    else:
                        await pages.later_page(
                            reads,
                            pages.RankedBy.VIEWS,
                            Where(),
                            position=(cursor.count, cursor.media_id),
                            scan_after=cursor.scan_after,
                            limit=21,
                            scan_limit=OMITTED_SCAN,
                        )
                    seconds.append(time.perf_counter() - started)
                timings[f"{label}:{name}"] = Latency.of(seconds)
    return timings


def _report(samples: dict[str, Load], detection: dict[str, Any], *, depth: int, changes: int, page_size: int) -> None:
    first, second, deep = (Latency.of(samples[name].latencies) for name in ("first", "2", "deep"))
    errors = sum(load.errors for load in samples.values())
    report(
        f"mediaList(sort: VIEWS, first: {page_size}) over GraphQL, {changes:,} counts changed since the cursors",
        ["page", "p50 ms", "p99 ms", "requests", "p50 vs page 2"],
        [
            ["1 (no cursor, writes nothing)", first.p50, first.p99, first.count, first.p50 / second.p50],
            ["2", second.p50, second.p99, second.count, 1.0],
            [f"{depth:,}", deep.p50, deep.p99, deep.count, deep.p50 / second.p50],
        ],
    )
    report(
        "omitted-item detection (SQL): the later-page statement vs the seed's read of everything above the cursor",
        ["query", "page 2 p50 ms", f"page {depth:,} p50 ms", "deep / shallow"],
        [
            [
                label,
                detection[f"{key}:2"].p50,
                detection[f"{key}:deep"].p50,
                detection[f"{key}:deep"].p50 / detection[f"{key}:2"].p50,
            ]
            for label, key in (("sync generation (ours)", "generation"), ("seed: all above the cursor", "seed"))
        ],
    )
    if errors:
        console.print(f"[red]{errors} responses carried errors[/]")
