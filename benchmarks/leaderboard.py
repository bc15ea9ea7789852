"""`mediagraph bench leaderboard`: submitScore throughput, rank lookups on huge boards, push latency.

Everything runs against real `mediagraph serve` processes on private databases and a
private Redis prefix; the huge boards are loaded straight into Redis and unlinked after.
"""

from __future__ import annotations

import asyncio
import resource
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
from sqlalchemy import insert, select
from sqlmodel import col

from benchmarks.harness import Latency, bench_settings, console, report
from benchmarks.leaderboard_push import PushFigures, push_latency
from benchmarks.leaderboard_ranks import RankFigures, measure
from benchmarks.leaderboard_servers import servers
from mediagraph import security
from mediagraph.cli.runtime import open_services
from mediagraph.db.endpoints import Endpoints
from mediagraph.db.leaderboards import Leaderboard
from mediagraph.db.users import User
from mediagraph.ids import to_global_id
from mediagraph.resolvers.leaderboard_periods import current_window
from mediagraph.resolvers.leaderboard_store import Board
from mediagraph.services import Services
from mediagraph.settings import Settings

SEED_PEAK_UPDATES_PER_SECOND = 2_500
DEFINE = """
mutation($n: String!, $o: ScoreOperator!, $b: [Float!]) {
  defineLeaderboard(name: $n, operator: $o, partitionBounds: $b) { id }
}
"""
SUBMIT = """
mutation($b: String!, $u: ID!, $s: Float!) { submitScore(leaderboard: $b, userId: $u, score: $s) { entry { rank } } }
"""


@dataclass(frozen=True)
class Options:
    submissions: int
    concurrency: int
    sizes: list[int]
    lookups: int
    subscribers: int
    rounds: int


@dataclass(frozen=True)
class Throughput:
    servers: int
    updates_per_second: float
    latency: Latency


def run(options: Options) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # A thousand websockets on each side of the connection.
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with bench_settings("leaderboard") as settings, servers(settings, 2) as urls:
        asyncio.run(_main(settings, urls, options))


async def _main(settings: Settings, urls: list[str], options: Options) -> None:
    endpoints = Endpoints(settings.database_url, tuple(settings.shard_urls), settings.redis_url)
    token = security.issue_token(settings, user_id=1, role=security.SERVICE_ROLE, token_version=0)
    headers = {"authorization": f"Bearer {token}"}
    async with open_services(settings, endpoints) as services, httpx.AsyncClient(headers=headers) as http:
        users = await _insert_users(services, max(options.subscribers, 1_000))
        throughput = [
            await _submit_load(http, urls[:count], users, options, board=f"throughput-{count}") for count in (1, 2)
        ]
        _report_throughput(throughput, options)

        ranks: list[RankFigures] = []
        for size in options.sizes:
            for bounds in ([], [125_000.0 * n for n in range(1, 8)]) if size >= 1_000_000 else ([],):
                board = await _board(services, http, urls[0], f"ranks-{size}-{len(bounds) + 1}", bounds=bounds)
                async with httpx.AsyncClient(base_url=urls[0]) as reader:
                    ranks.append(await measure(services.redis, reader, board, size, lookups=options.lookups, seed=size))
        _report_ranks(ranks)

        pushes: list[PushFigures] = []
        for watch in ("top", "entry"):
            name = f"live-{watch}"
            await _board(services, http, urls[0], name, operator="SET")
            # Everyone on the board, so a new leader moves every watched rank.
            for n, user in enumerate(users[: options.subscribers]):
                await _submit(http, urls[1], name, user, float(n))

            async def submit(user: str, score: float, name: str = name) -> None:
                await _submit(http, urls[1], name, user, score)

            pushes.append(
                await push_latency(
                    watch_url=urls[0],
                    submit=submit,
                    board=name,
                    watch=watch,
                    users=users[: options.subscribers],
                    rounds=options.rounds,
                )
            )
        _report_pushes(pushes)


async def _insert_users(services: Services, count: int) -> list[str]:
    rows = [
        {
            "id": services.ids.next_id(),
            "username": f"bench_{n}",
            "nickname": f"Bench {n}",
            "password_hash": "-",
            "role": "user",
            "created_at": datetime.now(UTC),
            "token_version": 0,
        }
        for n in range(count)
    ]
    async with services.databases.main_session() as session:
        await session.execute(insert(User), rows)
        await session.commit()
    return [to_global_id("User", row["id"]) for row in rows]  # type: ignore[arg-type]


async def _board(
    services: Services,
    http: httpx.AsyncClient,
    url: str,
    name: str,
    *,
    operator: str = "BEST",
    bounds: list[float] | None = None,
) -> Board:
    response = await http.post(
        f"{url}/graphql", json={"query": DEFINE, "variables": {"n": name, "o": operator, "b": bounds}}
    )
    assert not response.json().get("errors"), response.text
    async with services.databases.main_session() as session:
        definition = (await session.execute(select(Leaderboard).where(col(Leaderboard.name) == name))).scalar_one()
    now = datetime.now(UTC)
    return Board.of(services, definition, current_window(definition.period_kind, now), now=now)


async def _submit(http: httpx.AsyncClient, url: str, board: str, user: str, score: float) -> None:
    response = await http.post(
        f"{url}/graphql", json={"query": SUBMIT, "variables": {"b": board, "u": user, "s": score}}
    )
    body = response.json()
    assert not body.get("errors"), body


async def _submit_load(
    http: httpx.AsyncClient, urls: list[str], users: list[str], options: Options, *, board: str
) -> Throughput:
    response = await http.post(f"{urls[0]}/graphql", json={"query": DEFINE, "variables": {"n": board, "o": "BEST"}})
    assert not response.json().get("errors"), response.text
    latencies: list[float] = []
    counter = iter(range(options.submissions))

    async def client(worker: int) -> None:
        for n in counter:
            began = time.perf_counter()
            await _submit(http, urls[(worker + n) % len(urls)], board, users[n % len(users)], float(n))
            latencies.append(time.perf_counter() - began)

    warm = iter(range(200))
    await asyncio.gather(*(_warm(http, urls, board, users, warm) for _ in range(options.concurrency)))
    started = time.perf_counter()
    await asyncio.gather(*(client(worker) for worker in range(options.concurrency)))
    elapsed = time.perf_counter() - started
    return Throughput(len(urls), options.submissions / elapsed, Latency.of(latencies))


async def _warm(http: httpx.AsyncClient, urls: list[str], board: str, users: list[str], counter: object) -> None:
    for n in counter:  # type: ignore[attr-defined]
        await _submit(http, urls[n % len(urls)], board, users[n % len(users)], -1.0)


def _report_throughput(rows: list[Throughput], options: Options) -> None:
    report(
        f"submitScore through GraphQL over HTTP ({options.submissions:,} submissions, {options.concurrency} clients)",
        ["API processes", "updates/s", "× seed peak (2,500/s)", "p50 ms", "p99 ms"],
        [
            [
                row.servers,
                row.updates_per_second,
                row.updates_per_second / SEED_PEAK_UPDATES_PER_SECOND,
                row.latency.p50,
                row.latency.p99,
            ]
            for row in rows
        ],
    )


def _report_ranks(rows: list[RankFigures]) -> None:
    smallest = rows[0]
    report(
        "Rank lookup latency (p50 / p99 ms, one round trip each)",
        [
            "members",
            "partitions",
            "bytes/member",
            "load s",
            "ZRANK",
            "entry script",
            "top 10 script",
            "entry via GraphQL",
            "entry p50 / smallest",
        ],
        [
            [
                row.members,
                row.partitions,
                row.bytes_per_member,
                row.load_seconds,
                f"{row.zrank.p50:.3f} / {row.zrank.p99:.3f}",
                f"{row.entry_script.p50:.3f} / {row.entry_script.p99:.3f}",
                f"{row.top_10.p50:.3f} / {row.top_10.p99:.3f}",
                f"{row.graphql_entry.p50:.2f} / {row.graphql_entry.p99:.2f}",
                row.entry_script.p50 / smallest.entry_script.p50,
            ]
            for row in rows
        ],
    )


def _report_pushes(rows: list[PushFigures]) -> None:
    report(
        "Push latency: submitScore on one process to every subscriber on another (ms)",
        ["subscription", "subscribers", "rounds", "p50", "p99", "last subscriber p50", "missed"],
        [
            [row.watch, row.subscribers, row.rounds, row.latency.p50, row.latency.p99, row.last.p50, row.missed]
            for row in rows
        ],
    )
    console.print("Each round moves a new leader to the top, which changes every watched state.")
