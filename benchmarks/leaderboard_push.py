"""Push latency: many websocket subscribers on one process, scores submitted through another."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import websockets
from rich.progress import Progress

from benchmarks.harness import Latency

TOP = "subscription($n: String!) { leaderboardTop(name: $n, first: 10) { entries { rank score } } }"
ENTRY = "subscription($n: String!, $u: ID!) { leaderboardEntry(name: $n, userId: $u) { entry { rank score } } }"
ROUND_TIMEOUT_SECONDS = 30.0
OPEN_AT_ONCE = 50


@dataclass(frozen=True)
class PushFigures:
    watch: str
    subscribers: int
    rounds: int
    latency: Latency  # every delivery
    last: Latency  # per round: until the last subscriber had it
    missed: int


class Subscriber:
    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.received_at: float | None = None
        self.got = asyncio.Event()

    async def listen(self) -> None:
        async for raw in self.connection:
            message = orjson.loads(raw)
            if message["type"] == "ping":
                await self.connection.send(orjson.dumps({"type": "pong"}).decode())
            elif message["type"] == "next":
                if message["payload"].get("errors"):
                    raise RuntimeError(message)
                if self.received_at is None:
                    self.received_at = time.perf_counter()
                self.got.set()


async def _open(url: str, query: str, variables: dict[str, Any]) -> Subscriber:
    connection = await websockets.connect(url, subprotocols=["graphql-transport-ws"], max_queue=None)  # type: ignore[list-item]
    await connection.send(orjson.dumps({"type": "connection_init", "payload": {}}).decode())
    assert orjson.loads(await connection.recv())["type"] == "connection_ack"
    payload = {"query": query, "variables": variables}
    await connection.send(orjson.dumps({"id": uuid.uuid4().hex, "type": "subscribe", "payload": payload}).decode())
    return Subscriber(connection)


async def push_latency(
    *,
    watch_url: str,
    submit: Callable[[str, float], Awaitable[bool]],
    board: str,
    watch: str,
    users: list[str],
    rounds: int,
) -> PushFigures:
    url = watch_url.replace("http://", "ws://") + "/graphql"
    subscribers: list[Subscriber] = []
    with Progress(transient=True) as progress:
        task = progress.add_task(f"opening {len(users):,} {watch} subscriptions", total=len(users))
        for start in range(0, len(users), OPEN_AT_ONCE):
            batch = users[start : start + OPEN_AT_ONCE]
            opened = await asyncio.gather(
                *(_open(url, TOP if watch == "top" else ENTRY, {"n": board, "u": user}) for user in batch)
            )
            subscribers += opened
            progress.advance(task, len(batch))
    listeners = [asyncio.create_task(subscriber.listen()) for subscriber in subscribers]
    try:
        await _all_received(subscribers)  # the initial state
        deliveries: list[float] = []
        lasts: list[float] = []
        missed = 0
        for round_number in range(rounds):
            for subscriber in subscribers:
                subscriber.received_at = None
                subscriber.got.clear()
            # A user from the bottom jumps to the top: every rank on the board moves.
            began = time.perf_counter()
            await submit(users[round_number % len(users)], 1_000_000.0 + round_number)
            missed += await _all_received(subscribers)
            arrived = [s.received_at - began for s in subscribers if s.received_at is not None]
            deliveries += arrived
            lasts.append(max(arrived, default=0.0))
            await asyncio.sleep(0.2)
        return PushFigures(watch, len(subscribers), rounds, Latency.of(deliveries), Latency.of(lasts), missed)
    finally:
        for listener in listeners:
            listener.cancel()
        await asyncio.gather(*(subscriber.connection.close() for subscriber in subscribers), return_exceptions=True)


async def _all_received(subscribers: list[Subscriber]) -> int:
    """How many did not receive within the timeout."""
    waiting = [asyncio.create_task(subscriber.got.wait()) for subscriber in subscribers]
    _, pending = await asyncio.wait(waiting, timeout=ROUND_TIMEOUT_SECONDS)
    for task in pending:
        task.cancel()
    return len(pending)
