"""submitScore throughput through GraphQL over HTTP, one score per call or a hundred."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx

from benchmarks.harness import Latency, console, report

SEED_PEAK_UPDATES_PER_SECOND = 2_500
DEFINE = """
mutation($n: String!, $o: ScoreOperator!, $b: [Float!]) {
  defineLeaderboard(name: $n, operator: $o, partitionBounds: $b) { id }
}
"""
SUBMIT = """
mutation($b: String!, $u: ID!, $s: Float!) { submitScore(leaderboard: $b, userId: $u, score: $s) { entry { rank } } }
"""
SUBMIT_MANY = """
mutation($b: String!, $s: [ScoreInput!]!) { submitScores(leaderboard: $b, scores: $s) { changed } }
"""
WARM_UP_CALLS = 100


@dataclass(frozen=True)
class Throughput:
    mutation: str
    servers: int
    updates_per_second: float
    latency: Latency  # per call
    failed: int


async def define(http: httpx.AsyncClient, url: str, name: str, *, operator: str, bounds: list[float] | None) -> None:
    variables = {"n": name, "o": operator, "b": bounds}
    response = await http.post(f"{url}/graphql", json={"query": DEFINE, "variables": variables})
    assert not response.json().get("errors"), response.text


async def submit(http: httpx.AsyncClient, url: str, board: str, user: str, score: float) -> bool:
    return await _call(http, url, SUBMIT, {"b": board, "u": user, "s": score})


async def _call(http: httpx.AsyncClient, url: str, query: str, variables: dict[str, Any]) -> bool:
    response = await http.post(f"{url}/graphql", json={"query": query, "variables": variables})
    errors = response.json().get("errors")
    if errors:
        console.print(f"[red]{errors[0]['path']} failed:[/] {errors[0]['extensions']['code']}")
    return not errors


async def throughput(
    http: httpx.AsyncClient,
    urls: list[str],
    users: list[str],
    *,
    board: str,
    submissions: int,
    concurrency: int,
    batch: int,
    bounds: list[float] | None = None,
) -> Throughput:
    """`submissions` scores (BEST, always improving) from `concurrency` clients, `batch` per call."""
    await define(http, urls[0], board, operator="BEST", bounds=bounds)
    calls = submissions // batch
    latencies: list[float] = []
    failed = 0

    def variables(call: int) -> tuple[str, dict[str, Any]]:
        if batch == 1:
            return SUBMIT, {"b": board, "u": users[call % len(users)], "s": float(call)}
        items = [{"userId": users[(call * batch + n) % len(users)], "score": float(call)} for n in range(batch)]
        return SUBMIT_MANY, {"b": board, "s": items}

    async def client(worker: int, numbers: Any, record: bool) -> None:
        nonlocal failed
        for call in numbers:
            began = time.perf_counter()
            ok = await _call(http, urls[(worker + call) % len(urls)], *variables(call))
            if record:
                latencies.append(time.perf_counter() - began)
                failed += not ok

    warm = iter(range(WARM_UP_CALLS))
    await asyncio.gather(*(client(worker, warm, False) for worker in range(concurrency)))
    numbers = iter(range(WARM_UP_CALLS, WARM_UP_CALLS + calls))
    started = time.perf_counter()
    await asyncio.gather(*(client(worker, numbers, True) for worker in range(concurrency)))
    elapsed = time.perf_counter() - started
    name = "submitScore" if batch == 1 else f"submitScores × {batch}"
    return Throughput(name, len(urls), calls * batch / elapsed, Latency.of(latencies), failed)


def report_throughput(rows: list[Throughput], *, concurrency: int) -> None:
    report(
        f"Score submissions through GraphQL over HTTP ({concurrency} concurrent clients)",
        ["mutation", "API processes", "updates/s", "× seed peak (2,500/s)", "p50 ms/call", "p99 ms/call", "failed"],
        [
            [
                row.mutation,
                row.servers,
                row.updates_per_second,
                row.updates_per_second / SEED_PEAK_UPDATES_PER_SECOND,
                row.latency.p50,
                row.latency.p99,
                row.failed,
            ]
            for row in rows
        ],
    )
