"""`mediagraph bench http`: mediagraph and PostGraphile serving the same rows, under the same load.

All servers read one PostgreSQL database holding `--media` media rows (their
uploaders and likes). wrk drives each in turn with the same concurrency, for every
read workload, for several rounds, alternating which server goes first. Requests
cycle through every id of the table in random order (and through the cursors of the
first `--page-depth` pages of one scrolling session per connection), so no side can
answer from a few cached rows. Then the hot writes run on mediagraph alone (see
`http_writes`), each compared with mediagraph's own `media(id:)` run right before or
after it (alternating by round): the ratio of each round's pair, medians over rounds.
A response that is not a 200 or carries `errors` counts as a failure.

`--only` runs a subset (a write brings `by-id` along, its yardstick); `--profile`
records the mediagraph process with py-spy during each workload's first round.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from benchmarks import http_data, http_writes, profiling
from benchmarks.cpu import tree_cpu_seconds
from benchmarks.harness import WORK_DIR, bench_settings, console, report
from benchmarks.http_workloads import (
    BY_ID,
    MEDIAGRAPH,
    PAGE_SIZE,
    POSTGRAPHILE,
    POSTGRAPHILE5,
    Dialect,
    Listing,
    Workload,
)
from benchmarks.servers import (
    PeerServer,
    install_postgraphile,
    install_postgraphile5,
    mediagraph_process,
    postgraphile5_server,
    postgraphile_server,
)
from benchmarks.wrk import INSTALL_HINT, Load, LoadResult, bodies_load, run_wrk, write_bodies, wrk_path
from mediagraph.cli.runtime import open_services
from mediagraph.db.endpoints import configured_endpoints
from mediagraph.ids import to_global_id
from mediagraph.settings import Settings
from mediagraph.workers import measure_lags

# By-id requests cycle through every row (up to this many), in random order: at these rates
# an id comes back every several seconds, past any short-lived cache's bound.
DISTINCT_IDS = 100_000
WARM_UP_SECONDS = 2
# The longest a measurement waits for the server's workers to catch up with earlier writes.
SETTLE_SECONDS = 120.0
# Sessions whose cursors are collected at once.
WALKERS = 8
MEDIAGRAPH_NAME = "mediagraph"


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
    peers: tuple[str, ...] = ()  # further peers: "postgraphile5"
    workloads: tuple[Workload, ...] = ()
    profile: bool = False


@dataclass(frozen=True)
class Peer:
    key: str
    name: str
    dialect: Dialect
    install: Callable[[Callable[[str], None]], Path | None]
    server: Callable[..., AbstractContextManager[PeerServer]]


PEERS = {
    "postgraphile4": Peer("postgraphile4", "PostGraphile 4", POSTGRAPHILE, install_postgraphile, postgraphile_server),
    "postgraphile5": Peer(
        "postgraphile5", "PostGraphile 5", POSTGRAPHILE5, install_postgraphile5, postgraphile5_server
    ),
}


@dataclass
class Target:
    """One server under test: its GraphQL URL, dialect, and the load of each workload."""

    name: str
    url: str
    dialect: Dialect
    loads: dict[str, Load]
    pid: int | None = None  # for the profiler (mediagraph's) and the CPU each request costs


def recommended_serve_options(processes: int) -> list[str]:
    """What the README recommends for production."""
    return ["--processes", str(processes), "--loop", "uvloop", "--http", "httptools"]


def run(options: Options) -> None:
    if wrk_path() is None:
        console.print(f"[red]{INSTALL_HINT}[/]")
        raise SystemExit(2)
    reads = [workload for workload in options.workloads if not workload.write]
    writes = [workload for workload in options.workloads if workload.write]
    wanted_peers = [PEERS["postgraphile4"]] if options.postgraphile else []
    wanted_peers += [PEERS[key] for key in options.peers if PEERS[key] not in wanted_peers]
    with bench_settings(
        "http",
        environment="production",
        secret_key=os.urandom(24).hex(),
        # Every player here shares one address; the limit on new playback sessions is per address.
        playback_new_sessions_per_minute=1_000_000_000,
    ) as settings:
        folder = WORK_DIR / f"http-{settings.redis_prefix.split(':')[2]}"
        console.print(f"loading {options.media:,} media, {options.users:,} users and their likes ...")
        asyncio.run(http_data.load(settings.database_url, media=options.media, users=options.users))
        ids = asyncio.run(http_data.sample_media_ids(settings.database_url, DISTINCT_IDS))
        user_ids = asyncio.run(http_data.user_ids(settings.database_url))
        installed: list[tuple[Peer, Path]] = []
        if wanted_peers:
            asyncio.run(http_data.expose_for_postgraphile(settings.database_url))
        for peer in wanted_peers:
            executable = peer.install(console.print)
            if executable is None:
                console.print(f"[yellow]{peer.name} is unavailable: measured without it.[/]")
            else:
                installed.append((peer, executable))
        with ExitStack() as stack:
            server = stack.enter_context(
                mediagraph_process(
                    settings,
                    serve_options=recommended_serve_options(options.processes),
                    log=folder / "mediagraph.log",
                )
            )
            mediagraph = Target(MEDIAGRAPH_NAME, f"{server.base}/graphql", MEDIAGRAPH, {}, server.pid)
            targets = [mediagraph]
            for peer, executable in installed:
                running = stack.enter_context(
                    peer.server(
                        executable,
                        database_url=http_data.plain_url(settings.database_url),
                        schema=http_data.POSTGRAPHILE_SCHEMA,
                        log=folder / f"{peer.key}.log",
                    )
                )
                targets.append(Target(peer.name, running.url, peer.dialect, {}, running.pid))
            if writes:
                data = http_writes.write_data(
                    folder, settings, media_ids=ids, user_ids=user_ids, likers=http_data.likers(user_ids)
                )
                http_writes.define_board(mediagraph.url, data.service_token.read_text().strip())
                all_writes = http_writes.loads(data)
                mediagraph.loads.update({workload.key: all_writes[workload.key] for workload in writes})
            for target in targets:
                target.loads.update(_read_loads(target, reads, folder, ids, options))
            for workload in writes:
                mediagraph.loads[beside(workload).key] = mediagraph.loads[BY_ID.key]
            load_before = os.getloadavg()[0]
            try:
                results = _drive(targets, reads, writes, options, folder, settings)
            finally:
                # The request bodies are large and rebuilt every run; the servers' logs stay.
                for target in targets:
                    for load in target.loads.values():
                        for path in load.arguments:
                            path.unlink(missing_ok=True)
    # Other work on a shared machine shows here; the ratios are measured side by side regardless.
    console.print(f"load average (1 min) when measuring began: {load_before:.1f}, ended: {os.getloadavg()[0]:.1f}")
    _report(results, targets, reads, writes, options)


def _read_loads(
    target: Target, reads: list[Workload], folder: Path, ids: list[int], options: Options
) -> dict[str, Load]:
    dialect = target.dialect
    listings = sorted({workload.listing for workload in reads if workload.listing is not None}, key=lambda x: x.value)
    cursors: dict[Listing, list[str | None]] = {}
    for listing in listings:
        # One scrolling session per connection, as that many readers would have: mediagraph's
        # cursors carry a pagination session, and one session's pages are served one at a
        # time. Page-major order keeps the requests in flight on different sessions.
        console.print(f"{target.name}: walking {options.connections} sessions of the {listing.value} listing ...")
        walks = asyncio.run(_walk_sessions(target.url, dialect, listing, options.page_depth, options.connections))
        cursors[listing] = [walk[page] for page in range(max(map(len, walks))) for walk in walks if page < len(walk)]
    loads: dict[str, Load] = {}
    for workload in reads:
        query = workload.document(dialect)
        if workload.listing is not None:
            variables = [{"first": PAGE_SIZE, "after": cursor} for cursor in cursors[workload.listing]]
        else:
            variables = [{"id": to_global_id("Media", id_) if dialect.global_ids else str(id_)} for id_ in ids]
        slug = target.name.lower().replace(" ", "")
        loads[workload.key] = bodies_load(
            write_bodies(folder / f"{slug}-{workload.key}.jsonl", [{"query": query, "variables": v} for v in variables])
        )
    return loads


async def _walk_sessions(
    url: str, dialect: Dialect, listing: Listing, pages: int, sessions: int
) -> list[list[str | None]]:
    # A few walks at a time: collecting cursors is preparation, and must not fail for the
    # overload that the measurement itself is there to show.
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(120, pool=None), limits=httpx.Limits(max_connections=WALKERS)
    ) as client:
        return list(
            await asyncio.gather(*(_walk_cursors(client, url, dialect, listing, pages) for _ in range(sessions)))
        )


async def _walk_cursors(
    client: httpx.AsyncClient, url: str, dialect: Dialect, listing: Listing, pages: int
) -> list[str | None]:
    """The cursor before each of the first `pages` pages of one session, fetched from the server itself."""
    query = dialect.walk_document(listing)
    field = dialect.list_field(listing)
    cursors: list[str | None] = [None]
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


Results = dict[tuple[str, str], list[LoadResult]]


def _drive(
    targets: list[Target],
    reads: list[Workload],
    writes: list[Workload],
    options: Options,
    folder: Path,
    settings: Settings,
) -> Results:
    results: Results = {}
    mediagraph = targets[0]
    # Every read before any write. A write leaves work behind: counts that move under the walked
    # cursors (a replayed page would report the same moves in `omitted` again and again, which a
    # reader scrolling on never asks), and background work that runs for minutes on the same cores
    # (views to flush, engagement events, plays ending and rolled up). The peers have none of it.
    _settle(settings)
    for workload in reads:
        for target in targets:
            load = target.loads[workload.key]
            if load.start is not None:
                load.start(target.url)
            # Warm-up: connection pools, PostgreSQL's buffers, Node's JIT, cached documents.
            run_wrk(target.url, load, connections=options.connections, seconds=WARM_UP_SECONDS)
    for round_number in range(1, options.rounds + 1):
        # Alternating which side goes first lets a shared machine's drifts hit both.
        order = targets if round_number % 2 else targets[::-1]
        for workload in reads:
            for target in order:
                _record(results, round_number, workload, target, options, folder)
    for workload in writes:
        load = mediagraph.loads[workload.key]
        if load.start is not None:
            load.start(mediagraph.url)
        run_wrk(mediagraph.url, load, connections=options.connections, seconds=WARM_UP_SECONDS)
    for round_number in range(1, options.rounds + 1):
        for workload in writes:
            # Each write is paired with a media(id:) run just before or after it (alternating by
            # round), its yardstick: a shared machine's speed drifts over the minutes between the
            # reads and the writes, and a ratio of runs far apart measures the drift.
            pair = [beside(workload), workload]
            for measured in pair if round_number % 2 else pair[::-1]:
                # Each run starts once the workers have taken up what the writes before it left.
                _settle(settings)
                _record(results, round_number, measured, mediagraph, options, folder)
    return results


def beside(write: Workload) -> Workload:
    """The media(id:) read measured next to `write`, under a key of its own."""
    return replace(
        BY_ID, key=f"{BY_ID.key} beside {write.key}", name=f"{BY_ID.name} (beside {write.name})", beside=write.key
    )


def _record(
    results: Results, round_number: int, workload: Workload, target: Target, options: Options, folder: Path
) -> None:
    # The reads beside the writes are the reads profiled already.
    profile = options.profile and round_number == 1 and target.name == MEDIAGRAPH_NAME and workload.beside is None
    result = _measure(target, workload, options, folder if profile else None)
    results.setdefault((workload.key, target.name), []).append(result)
    cpu = result.server_cpu_us_per_request
    console.print(
        f"round {round_number}/{options.rounds} {workload.name:<36} {target.name:<14} "
        f"{result.requests_per_second:>9,.0f} req/s  p50 {result.p50_ms:7.2f} ms  "
        f"p99 {result.p99_ms:7.2f} ms  failures {result.failures + result.socket_errors}"
        + (f"  CPU {cpu:6.0f} µs/req" if cpu is not None else "")
    )


def _settle(settings: Settings) -> None:
    """Until the server's workers have taken up what earlier writes left (every backlog empty)."""
    waited = asyncio.run(_wait_for_workers(settings))
    if waited is None:
        console.print(f"[yellow]the workers still had a backlog after {SETTLE_SECONDS:g} s; measuring anyway[/]")
    elif waited >= 1:
        console.print(f"(waited {waited:.1f} s for the workers to catch up)")


async def _wait_for_workers(settings: Settings) -> float | None:
    started = time.monotonic()
    async with open_services(settings, configured_endpoints(settings)) as services:
        while time.monotonic() - started < SETTLE_SECONDS:
            if not any(lag.entries for lag in await measure_lags(services)):
                return time.monotonic() - started
            await asyncio.sleep(0.25)
    return None


def _measure(target: Target, workload: Workload, options: Options, profile_folder: Path | None) -> LoadResult:
    cpu_before = tree_cpu_seconds(target.pid) if target.pid is not None else None
    result = _run_load(target, workload, options, profile_folder)
    cpu_after = tree_cpu_seconds(target.pid) if target.pid is not None else None
    if cpu_before is None or cpu_after is None:
        return result
    return replace(result, server_cpu_seconds=cpu_after - cpu_before)


def _run_load(target: Target, workload: Workload, options: Options, profile_folder: Path | None) -> LoadResult:
    load = target.loads[workload.key]
    if profile_folder is None or target.pid is None:
        return run_wrk(target.url, load, connections=options.connections, seconds=options.seconds)
    output = profile_folder / "profiles" / f"{workload.key}.speedscope.json"
    with profiling.recording(target.pid, output):
        result = run_wrk(target.url, load, connections=options.connections, seconds=options.seconds)
    summary = profiling.summarize(output)
    title = f"py-spy, mediagraph during {workload.name} ({summary.samples:,} samples, {summary.seconds:.1f} s busy)"
    report(f"{title}: packages (self)", ["package", "%"], summary.by_package)
    report(
        f"{title}: frames (self)",
        ["frame", "self %", "total %"],
        [[share.frame, share.self_percent, share.total_percent] for share in summary.by_self],
    )
    report(
        f"{title}: mediagraph's functions with what they call",
        ["frame", "self %", "total %"],
        [[share.frame, share.self_percent, share.total_percent] for share in summary.ours_by_total],
    )
    console.print(f"profile: {output} (open it in https://www.speedscope.app)")
    return result


def _median(results: list[LoadResult]) -> tuple[float, float, float, int]:
    return (
        statistics.median(r.requests_per_second for r in results),
        statistics.median(r.p50_ms for r in results),
        statistics.median(r.p99_ms for r in results),
        sum(r.failures + r.socket_errors for r in results),
    )


def _median_cpu(results: list[LoadResult]) -> float | None:
    """The server's CPU µs per request, median over rounds (None where it could not be read)."""
    figures = [cpu for cpu in (r.server_cpu_us_per_request for r in results) if cpu is not None]
    return statistics.median(figures) if figures else None


def _cpu_cell(cpu: float | None) -> str:
    return f"{cpu:,.0f}" if cpu is not None else "-"


def _cpu_ratio(mine: float | None, theirs: float | None) -> str:
    return f"{mine / theirs:.2f}x" if mine is not None and theirs else "-"


def _report(
    results: Results, targets: list[Target], reads: list[Workload], writes: list[Workload], options: Options
) -> None:
    setup = (
        f"{options.media:,} media, {options.connections} connections, {options.rounds} rounds of "
        f"{options.seconds:g} s, medians; mediagraph {' '.join(recommended_serve_options(options.processes))}"
    )
    rows = []
    for workload in reads:
        for target in targets:
            measured = results[(workload.key, target.name)]
            rps, p50, p99, failures = _median(measured)
            rows.append([workload.name, target.name, rps, p50, p99, failures, _cpu_cell(_median_cpu(measured))])
    if rows:
        report(
            f"bench http: {setup}",
            ["workload", "server", "req/s", "p50 ms", "p99 ms", "failures", "server CPU µs/req"],
            rows,
        )
    for peer in targets[1:]:
        ratios = []
        for workload in reads:
            mine = _median(results[(workload.key, MEDIAGRAPH_NAME)])
            theirs = _median(results[(workload.key, peer.name)])
            ratios.append(
                [
                    workload.name,
                    f"{mine[0] / theirs[0]:.2f}x" if theirs[0] else "-",
                    f"{mine[2] / theirs[2]:.2f}x" if theirs[2] else "-",
                ]
            )
        report(
            f"mediagraph / {peer.name} (throughput above 1 and p99 below 1 favour mediagraph)",
            ["workload", "throughput", "p99 latency"],
            ratios,
        )
        # What each request costs the server's own processes (not PostgreSQL's or Redis's):
        # steadier than throughput where neighbours take a varying share of the cores.
        report(
            f"server CPU per request, mediagraph / {peer.name} (below 1 favours mediagraph)",
            ["workload", "CPU per request"],
            [
                [
                    workload.name,
                    _cpu_ratio(
                        _median_cpu(results[(workload.key, MEDIAGRAPH_NAME)]),
                        _median_cpu(results[(workload.key, peer.name)]),
                    ),
                ]
                for workload in reads
            ],
        )
    if reads and len(targets) < 2 and (options.postgraphile or options.peers):
        console.print("No peer could be measured, so there are no ratios.")
    if writes:
        write_rows = []
        for workload in writes:
            measured = results[(workload.key, MEDIAGRAPH_NAME)]
            yardstick = results[(beside(workload).key, MEDIAGRAPH_NAME)]
            rps, p50, p99, failures = _median(measured)
            cpu = _median_cpu(measured)
            write_rows.append(
                [
                    workload.name,
                    rps,
                    p50,
                    p99,
                    failures,
                    _cpu_cell(cpu),
                    _median(yardstick)[0],
                    _cpu_cell(_median_cpu(yardstick)),
                    paired_ratio(yardstick, measured, cpu=True),
                    paired_ratio(yardstick, measured, cpu=False),
                ]
            )
        report(
            f"bench http writes, mediagraph alone: {setup}; each against its media(id:) measured beside it "
            "(ratios: medians of each round's pair)",
            [
                "write",
                "req/s",
                "p50 ms",
                "p99 ms",
                "failures",
                "server CPU µs/req",
                "media(id:) req/s",
                "media(id:) CPU µs/req",
                "media(id:) CPU / its CPU",
                "throughput / media(id:)",
            ],
            write_rows,
        )


def paired_ratio(yardstick: list[LoadResult], measured: list[LoadResult], *, cpu: bool) -> str:
    """The median over rounds of media(id:)'s CPU per request / the write's (`cpu`), or the
    write's throughput / media(id:)'s, each round's pair measured minutes apart at most."""
    ratios = []
    for read, write in zip(yardstick, measured, strict=True):
        if cpu:
            if read.server_cpu_us_per_request is not None and write.server_cpu_us_per_request:
                ratios.append(read.server_cpu_us_per_request / write.server_cpu_us_per_request)
        elif read.requests_per_second:
            ratios.append(write.requests_per_second / read.requests_per_second)
    return f"{statistics.median(ratios):.2f}x" if ratios else "-"
