"""`mediagraph bench http`: mediagraph and PostGraphile serving the same rows, under the same load.

Both servers read one PostgreSQL database holding `--media` media rows (and their
uploaders). wrk drives each in turn with the same concurrency, for every workload,
for several rounds, alternating which server goes first. Requests cycle through
every id of the table in random order (and through the cursors of the first
`--page-depth` pages), so neither side can answer from a few cached rows. A
response that is not a 200 or carries `errors` counts as a failure.
"""

from __future__ import annotations

import asyncio
import os
import statistics
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks import http_data
from benchmarks.harness import WORK_DIR, bench_settings, console, report
from benchmarks.servers import install_postgraphile, mediagraph_server, postgraphile_server
from benchmarks.wrk import INSTALL_HINT, LoadResult, run_wrk, write_bodies, wrk_path
from mediagraph.ids import to_global_id

# The listing each side pages through: by view count, most viewed first. mediagraph's
# also tracks the session's served items to report the omitted ones on later pages.
MEDIAGRAPH_LIST = "mediaList(sort: VIEWS, first: $first, after: $after)"
POSTGRAPHILE_LIST = "allMedia(first: $first, after: $after, orderBy: [VIEW_COUNT_DESC, ID_DESC])"
# Counts on each media item: mediagraph's are live (flushed plus pending views) and carry
# likes too; PostGraphile's is the column.
MEDIAGRAPH_COUNTS = "viewCount likeCount"
POSTGRAPHILE_COUNTS = "viewCount"

PAGE_SIZE = 20
# By-id requests cycle through every row (up to this many), in random order: at these rates
# an id comes back every several seconds, past any short-lived cache's bound.
DISTINCT_IDS = 100_000


@dataclass(frozen=True)
class Workload:
    name: str
    mediagraph: str
    postgraphile: str
    paged: bool


WORKLOADS = (
    Workload(
        "media by id",
        "query($id: ID!) { media(id: $id) { id title description tags contentType createdAt } }",
        "query($id: BigInt!) { mediaById(id: $id) { id title description tags contentType createdAt } }",
        paged=False,
    ),
    Workload(
        f"{PAGE_SIZE}-item page by view count",
        f"query($first: Int, $after: String) {{ {MEDIAGRAPH_LIST} {{ edges {{ cursor node {{ id title tags createdAt"
        f" {MEDIAGRAPH_COUNTS} }} }} pageInfo {{ hasNextPage endCursor }} }} }}",
        f"query($first: Int, $after: Cursor) {{ {POSTGRAPHILE_LIST} {{ edges {{ cursor node {{ id title tags createdAt"
        f" {POSTGRAPHILE_COUNTS} }} }} pageInfo {{ hasNextPage endCursor }} }} }}",
        paged=True,
    ),
    Workload(
        f"{PAGE_SIZE} media with uploader and counts",
        f"query($first: Int, $after: String) {{ {MEDIAGRAPH_LIST} {{ edges {{ node {{ id title {MEDIAGRAPH_COUNTS}"
        " uploader { id username nickname } } } pageInfo { hasNextPage endCursor } } }",
        f"query($first: Int, $after: Cursor) {{ {POSTGRAPHILE_LIST} {{ edges {{ node {{ id title {POSTGRAPHILE_COUNTS}"
        " userByOwnerId { id username nickname } } } pageInfo { hasNextPage endCursor } } }",
        paged=True,
    ),
)


@dataclass(frozen=True)
class Options:
    media: int
    users: int
    seconds: float
    rounds: int
    connections: int
    processes: int
    page_depth: int
    postgraphile: bool


@dataclass(frozen=True)
class Target:
    """One server under test: its GraphQL URL, and the request bodies of each workload."""

    name: str
    url: str
    bodies: dict[str, Path]


def recommended_serve_options(processes: int) -> list[str]:
    """What the README recommends for production."""
    return ["--processes", str(processes), "--loop", "uvloop", "--http", "httptools"]


def run(options: Options) -> None:
    if wrk_path() is None:
        console.print(f"[red]{INSTALL_HINT}[/]")
        raise SystemExit(2)
    with bench_settings("http", environment="production", secret_key=os.urandom(24).hex()) as settings:
        folder = WORK_DIR / f"http-{settings.redis_prefix.split(':')[2]}"
        console.print(f"loading {options.media:,} media and {options.users:,} users ...")
        asyncio.run(http_data.load(settings.database_url, media=options.media, users=options.users))
        ids = asyncio.run(http_data.sample_media_ids(settings.database_url, DISTINCT_IDS))
        executable = None
        if options.postgraphile:
            asyncio.run(http_data.expose_for_postgraphile(settings.database_url))
            executable = install_postgraphile(console.print)
        with ExitStack() as stack:
            base = stack.enter_context(
                mediagraph_server(
                    settings,
                    serve_options=recommended_serve_options(options.processes),
                    log=folder / "mediagraph.log",
                )
            )
            targets = [_target("mediagraph", f"{base}/graphql", folder, ids, options)]
            if executable is not None:
                url = stack.enter_context(
                    postgraphile_server(
                        executable,
                        database_url=http_data.plain_url(settings.database_url),
                        schema=http_data.POSTGRAPHILE_SCHEMA,
                        log=folder / "postgraphile.log",
                    )
                )
                targets.append(_target("PostGraphile", url, folder, ids, options))
            else:
                console.print("[yellow]PostGraphile is unavailable: measuring mediagraph alone, without ratios.[/]")
            try:
                results = _drive(targets, options)
            finally:
                # The request bodies are large and rebuilt every run; the servers' logs stay.
                for target in targets:
                    for bodies in target.bodies.values():
                        bodies.unlink(missing_ok=True)
    _report(results, targets, options)


def _target(name: str, url: str, folder: Path, ids: list[int], options: Options) -> Target:
    is_mediagraph = name == "mediagraph"
    list_field = MEDIAGRAPH_LIST if is_mediagraph else POSTGRAPHILE_LIST
    cursor_type = "String" if is_mediagraph else "Cursor"
    # One scrolling session per connection, as that many readers would have: mediagraph's
    # cursors carry a pagination session, and one session's pages are served one at a
    # time. Page-major order keeps the requests in flight on different sessions.
    walks = asyncio.run(_walk_sessions(url, list_field, cursor_type, options.page_depth, options.connections))
    cursors = [walk[page] for page in range(max(map(len, walks))) for walk in walks if page < len(walk)]
    bodies: dict[str, Path] = {}
    for workload in WORKLOADS:
        query = workload.mediagraph if is_mediagraph else workload.postgraphile
        if workload.paged:
            variables = [{"first": PAGE_SIZE, "after": cursor} for cursor in cursors]
        else:
            variables = [{"id": to_global_id("Media", id_) if is_mediagraph else str(id_)} for id_ in ids]
        slug = workload.name.replace(" ", "-")
        bodies[workload.name] = write_bodies(
            folder / f"{name.lower()}-{slug}.jsonl", [{"query": query, "variables": v} for v in variables]
        )
    return Target(name, url, bodies)


async def _walk_sessions(
    url: str, list_field: str, cursor_type: str, pages: int, sessions: int
) -> list[list[str | None]]:
    return list(await asyncio.gather(*(_walk_cursors(url, list_field, cursor_type, pages) for _ in range(sessions))))


async def _walk_cursors(url: str, list_field: str, cursor_type: str, pages: int) -> list[str | None]:
    """The cursor before each of the first `pages` pages of one session, fetched from the server itself."""
    query = f"query($first: Int, $after: {cursor_type}) {{ {list_field} {{ pageInfo {{ hasNextPage endCursor }} }} }}"
    field = list_field.split("(")[0]
    cursors: list[str | None] = [None]
    async with httpx.AsyncClient(timeout=60) as client:
        while len(cursors) < pages:
            variables = {"first": PAGE_SIZE, "after": cursors[-1]}
            body = (await client.post(url, json={"query": query, "variables": variables})).json()
            if body.get("errors"):
                raise RuntimeError(f"walking {field} failed: {body['errors']}")
            info = body["data"][field]["pageInfo"]
            if not info["hasNextPage"]:
                break
            cursors.append(info["endCursor"])
    return cursors


def _drive(targets: list[Target], options: Options) -> dict[tuple[str, str], list[LoadResult]]:
    results: dict[tuple[str, str], list[LoadResult]] = {}
    for workload in WORKLOADS:
        for target in targets:
            # Warm-up: connection pools, PostgreSQL's buffers, Node's JIT, cached documents.
            run_wrk(target.url, target.bodies[workload.name], connections=options.connections, seconds=2)
    for round_number in range(1, options.rounds + 1):
        for workload in WORKLOADS:
            # Alternate which side goes first, so a shared machine's drifts hit both.
            for target in targets if round_number % 2 else list(reversed(targets)):
                result = run_wrk(
                    target.url, target.bodies[workload.name], connections=options.connections, seconds=options.seconds
                )
                results.setdefault((workload.name, target.name), []).append(result)
                console.print(
                    f"round {round_number}/{options.rounds} {workload.name:<36} {target.name:<12} "
                    f"{result.requests_per_second:>9,.0f} req/s  p50 {result.p50_ms:7.2f} ms  "
                    f"p99 {result.p99_ms:7.2f} ms  failures {result.failures + result.socket_errors}"
                )
    return results


def _median(results: list[LoadResult]) -> tuple[float, float, float, int]:
    return (
        statistics.median(r.requests_per_second for r in results),
        statistics.median(r.p50_ms for r in results),
        statistics.median(r.p99_ms for r in results),
        sum(r.failures + r.socket_errors for r in results),
    )


def _report(results: dict[tuple[str, str], list[LoadResult]], targets: list[Target], options: Options) -> None:
    rows = []
    for workload in WORKLOADS:
        for target in targets:
            rps, p50, p99, failures = _median(results[(workload.name, target.name)])
            rows.append([workload.name, target.name, rps, p50, p99, failures])
    report(
        f"bench http: {options.media:,} media, {options.connections} connections, {options.rounds} rounds of "
        f"{options.seconds:g} s, medians; mediagraph {' '.join(recommended_serve_options(options.processes))}",
        ["workload", "server", "req/s", "p50 ms", "p99 ms", "failures"],
        rows,
    )
    if len(targets) < 2:
        console.print("PostGraphile was not measured, so there are no ratios.")
        return
    ratios = []
    for workload in WORKLOADS:
        mine, theirs = (_median(results[(workload.name, target.name)]) for target in targets)
        ratios.append(
            [
                workload.name,
                f"{mine[0] / theirs[0]:.2f}x" if theirs[0] else "-",
                f"{mine[2] / theirs[2]:.2f}x" if theirs[2] else "-",
            ]
        )
    report(
        "mediagraph / PostGraphile (throughput above 1 and p99 below 1 favour mediagraph)",
        ["workload", "throughput", "p99 latency"],
        ratios,
    )
