"""`mediagraph bench leaderboard`: submitScore throughput, rank lookups on huge boards, push latency.

Everything runs against real `mediagraph serve` processes on private databases and a
private Redis prefix; the huge boards are loaded straight into Redis and unlinked after.
"""

from __future__ import annotations

import asyncio
import resource
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
from sqlalchemy import insert, select
from sqlmodel import col

from benchmarks.harness import LOOPBACK_CLIENTS, bench_settings, console, report
from benchmarks.leaderboard_push import PushFigures, push_latency
from benchmarks.leaderboard_ranks import RankFigures, measure
from benchmarks.leaderboard_servers import servers
from benchmarks.leaderboard_submit import define, report_throughput, submit, throughput
from mediagraph import security
from mediagraph.cli.runtime import open_services
from mediagraph.db.endpoints import Endpoints
from mediagraph.db.leaderboards import Leaderboard
from mediagraph.db.users import User
from mediagraph.ids import to_global_id
from mediagraph.resolvers.leaderboards.periods import current_window
from mediagraph.resolvers.leaderboards.store import Board
from mediagraph.services import Services
from mediagraph.settings import Settings

# A busy shared machine stalls some requests for seconds; they count, they do not abort the run.
HTTP_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class Options:
    submissions: int
    concurrency: int
    sizes: list[int]
    lookups: int
    subscribers: int
    rounds: int


def run(options: Options) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # A thousand websockets on each side of the connection.
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with (
        bench_settings("leaderboard", max_connections_per_address=LOOPBACK_CLIENTS) as settings,
        servers(settings, 2) as urls,
    ):
        asyncio.run(_main(settings, urls, options))


async def _main(settings: Settings, urls: list[str], options: Options) -> None:
    endpoints = Endpoints(settings.database_url, tuple(settings.shard_urls), settings.redis_url)
    token = security.issue_token(settings, user_id=1, role=security.SERVICE_ROLE, token_version=0)
    headers = {"authorization": f"Bearer {token}"}
    async with (
        open_services(settings, endpoints) as services,
        httpx.AsyncClient(headers=headers, timeout=HTTP_TIMEOUT_SECONDS) as http,
    ):
        users = await _insert_users(services, max(options.subscribers, 1_000))
        rows = [
            await throughput(
                http,
                urls[:servers],
                users,
                board=f"throughput-{servers}-{batch}",
                submissions=options.submissions,
                concurrency=options.concurrency,
                batch=batch,
            )
            for batch in (1, 100)
            for servers in (1, 2)
        ]
        report_throughput(rows, concurrency=options.concurrency)

        ranks: list[RankFigures] = []
        for size in options.sizes:
            for bounds in ([], [125_000.0 * n for n in range(1, 8)]) if size >= 1_000_000 else ([],):
                board = await _board(services, http, urls[0], f"ranks-{size}-{len(bounds) + 1}", bounds=bounds)
                async with httpx.AsyncClient(base_url=urls[0], timeout=HTTP_TIMEOUT_SECONDS) as reader:
                    ranks.append(await measure(services.redis, reader, board, size, lookups=options.lookups, seed=size))
        _report_ranks(ranks)

        pushes: list[PushFigures] = []
        for watch in ("top", "entry"):
            name = f"live-{watch}"
            await _board(services, http, urls[0], name, operator="SET")
            # Everyone on the board, so a new leader moves every watched rank.
            for n, user in enumerate(users[: options.subscribers]):
                await submit(http, urls[1], name, user, float(n))

            async def submit_one(user: str, score: float, name: str = name) -> bool:
                return await submit(http, urls[1], name, user, score)

            pushes.append(
                await push_latency(
                    watch_url=urls[0],
                    submit=submit_one,
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
    await define(http, url, name, operator=operator, bounds=bounds)
    async with services.databases.main_session() as session:
        definition = (await session.execute(select(Leaderboard).where(col(Leaderboard.name) == name))).scalar_one()
    now = datetime.now(UTC)
    return Board.of(services, definition, current_window(definition.period_kind, now), now=now)


def _report_ranks(rows: list[RankFigures]) -> None:
    smallest = rows[0]
    report(
        "Rank lookup latency (p50 / p99 ms; an entry is one pipelined round trip, the top 10 two)",
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
