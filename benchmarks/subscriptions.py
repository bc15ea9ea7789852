"""`viewCount` subscribers by the thousand on one server process: delay from update to receipt.

Client processes open the sockets (benchmarks/ws_client.py) and stamp every `next`
message with the wall clock as its bytes arrive; the driver records a view through
GraphQL once a round, stamping the moment it sends the mutation. The delay of a
delivery is the difference, so it covers the mutation, the announcement through
Redis, the shared execution and every socket write, up to the client's read.

Each mode runs on a fresh server so memory figures do not inherit freed memory:
`shared` is the subscription as clients write it; `per subscriber` is the same
field spread through a fragment, which the server executes once per subscriber
(the way every subscription ran before sharing), for the side-by-side ratio.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import resource
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection

import httpx
import psutil

from benchmarks.harness import LOOPBACK_CLIENTS, WORK_DIR, Latency, bench_settings, bulk_media, console, report
from benchmarks.servers import mediagraph_server
from benchmarks.ws_client import Subscription
from mediagraph.cli.runtime import open_services
from mediagraph.db.endpoints import configured_endpoints
from mediagraph.ids import to_global_id
from mediagraph.settings import Settings

SHARED = "subscription($id: ID!) { viewCount(mediaId: $id) { mediaId viewCount } }"
PER_SUBSCRIBER = "subscription($id: ID!) { ...Count } fragment Count on Subscription { viewCount(mediaId: $id) { mediaId viewCount } }"
RECORD_VIEW = "mutation($id: ID!) { recordView(mediaId: $id) { counted media { viewCount } } }"
OPEN_AT_ONCE = 100
OPEN_TIMEOUT_SECONDS = 600
TARGET_P99_MS = 250.0


@dataclass(frozen=True)
class Options:
    subscribers: int
    clients: int
    rounds: int
    interval: float
    compare: bool


@dataclass(frozen=True)
class ModeFigures:
    mode: str
    subscribers: int
    opened: int
    bytes_per_subscriber: float
    delay: Latency  # every delivery
    last: Latency  # per round: until the last subscriber had it
    missed: int
    errors: int


def run(options: Options) -> None:
    _raise_open_file_limit()
    modes = [("shared", SHARED)] + ([("per subscriber", PER_SUBSCRIBER)] if options.compare else [])
    with bench_settings("subscriptions", max_connections_per_address=LOOPBACK_CLIENTS) as settings:
        # A media per mode: a server that stops while announcing a media holds its push
        # claim for a few seconds (subscriptions/views.py), which would hold up the next mode.
        media_ids = asyncio.run(_media(settings, len(modes)))
        figures = [
            _measure(settings, mode, query, media_id, options)
            for (mode, query), media_id in zip(modes, media_ids, strict=True)
        ]
    rows: list[list[object]] = [
        [
            f.mode,
            f"{f.opened:,}/{f.subscribers:,}",
            f.bytes_per_subscriber / 1024,
            f.delay.p50,
            f.delay.p99,
            f.last.p99,
            f.missed,
            f.errors,
        ]
        for f in figures
    ]
    report(
        f"viewCount on one server process: {options.rounds} updates, {options.clients} client processes",
        ["mode", "subscribed", "KiB/sub", "p50 ms", "p99 ms", "last p99", "missed", "errors"],
        rows,
    )
    shared = figures[0]
    verdict = "met" if shared.delay.p99 < TARGET_P99_MS and not shared.missed else "NOT met"
    console.print(f"target p99 < {TARGET_P99_MS:.0f} ms at {shared.subscribers:,} subscribers: {verdict}")
    if len(figures) > 1 and figures[1].delay.p99:
        other = figures[1]
        console.print(
            f"shared / per subscriber: p99 delay {shared.delay.p99 / other.delay.p99:.2f}x, "
            f"memory {shared.bytes_per_subscriber / max(other.bytes_per_subscriber, 1):.2f}x"
        )


def _raise_open_file_limit() -> None:
    # Client processes inherit it; the server process raises its own the same way as a child.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def _media(settings: Settings, count: int) -> list[str]:
    async with open_services(settings, configured_endpoints(settings)) as services:
        ids = await bulk_media(services, count)
    return [to_global_id("Media", media_id) for media_id in ids]


def _measure(settings: Settings, mode: str, query: str, media_id: str, options: Options) -> ModeFigures:
    log = WORK_DIR / f"subscriptions-{uuid.uuid4().hex[:6]}.log"
    serve = ["--processes", "1", "--no-workers"]
    with (
        mediagraph_server(settings, serve_options=serve, log=log) as base,
        _clients(base, query, media_id, options) as pipes,
    ):
        server = _listening_process(base)
        before = server.memory_info().rss
        opened = failed = 0
        with console.status(f"{mode}: opening {options.subscribers:,} subscriptions"):
            for pipe in pipes:
                if not pipe.poll(OPEN_TIMEOUT_SECONDS):
                    raise RuntimeError("a client process did not finish subscribing")
                _, ok, bad = pipe.recv()
                opened += ok
                failed += bad
        time.sleep(1.0)
        after = server.memory_info().rss
        sent = _drive_updates(base, media_id, options)
        for pipe in pipes:
            pipe.send("stop")
        arrivals: list[tuple[int, float]] = []
        errors = 0
        for pipe in pipes:
            received, bad_messages = pipe.recv()
            arrivals += received
            errors += bad_messages
    delays: list[float] = []
    lasts: dict[int, float] = {}
    for count, arrived in arrivals:
        if count in sent:
            delay = arrived - sent[count]
            delays.append(delay)
            lasts[count] = max(lasts.get(count, 0.0), delay)
    expected = opened * len(sent)
    return ModeFigures(
        mode=mode,
        subscribers=options.subscribers,
        opened=opened,
        bytes_per_subscriber=(after - before) / max(opened, 1),
        delay=Latency.of(delays),
        last=Latency.of(list(lasts.values())),
        missed=expected - len(delays) + failed * len(sent),
        errors=errors,
    )


def _drive_updates(base: str, media_id: str, options: Options) -> dict[int, float]:
    """Record one view per round; the wall-clock moment each new count was asked for."""
    sent: dict[int, float] = {}
    with httpx.Client(base_url=base, timeout=30) as client, console.status("recording views") as status:
        # Round 0 warms the path up (first executions, first pushes) and is not counted.
        for round_number in range(options.rounds + 1):
            status.update(f"update {round_number}/{options.rounds}")
            began = time.time()
            response = client.post(
                "/graphql",
                json={"query": RECORD_VIEW, "variables": {"id": media_id}},
                headers={"user-agent": f"bench-subscriptions-{uuid.uuid4().hex}"},
            ).json()
            payload = response.get("data", {}) and response["data"]["recordView"]
            if not payload or not payload["counted"]:
                raise RuntimeError(f"a view was not counted: {response}")
            if round_number:
                sent[int(payload["media"]["viewCount"])] = began
            time.sleep(options.interval)
    return sent


@contextmanager
def _clients(base: str, query: str, media_id: str, options: Options) -> Iterator[list[Connection]]:
    context = multiprocessing.get_context("spawn")
    host, port = base.removeprefix("http://").split(":")
    pipes: list[Connection] = []
    processes = []
    share, extra = divmod(options.subscribers, options.clients)
    for index in range(options.clients):
        ours, theirs = context.Pipe()
        count = share + (index < extra)
        process = context.Process(
            target=client_process, args=(host, int(port), query, {"id": media_id}, count, theirs), daemon=True
        )
        process.start()
        pipes.append(ours)
        processes.append(process)
    try:
        yield pipes
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()


def _listening_process(base: str) -> psutil.Process:
    port = int(base.rsplit(":", 1)[1])
    for connection in psutil.net_connections(kind="tcp"):
        listening = connection.status == psutil.CONN_LISTEN and connection.laddr and connection.laddr.port == port
        if listening and connection.pid is not None:
            return psutil.Process(connection.pid)
    raise RuntimeError(f"no process listens on port {port}")


def client_process(
    host: str, port: int, query: str, variables: dict[str, object], count: int, pipe: Connection
) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(_client_main(host, port, query, variables, count, pipe))


async def _client_main(
    host: str, port: int, query: str, variables: dict[str, object], count: int, pipe: Connection
) -> None:
    loop = asyncio.get_running_loop()
    turns = asyncio.Semaphore(OPEN_AT_ONCE)

    async def open_one() -> Subscription | None:
        async with turns:
            subscription = Subscription(host, port, query, variables, loop.create_future())
            try:
                await loop.create_connection(lambda: subscription, host, port)
                await asyncio.wait_for(subscription.subscribed, 60)
            except (OSError, TimeoutError, ConnectionError):
                subscription.close()
                return None
            return subscription

    opened = [s for s in await asyncio.gather(*(open_one() for _ in range(count))) if s is not None]
    for subscription in opened:
        # The initial state is not a delivery of an update.
        subscription.received.clear()
    pipe.send(("subscribed", len(opened), count - len(opened)))
    await loop.run_in_executor(None, pipe.recv)
    await asyncio.sleep(0.5)  # the last round's stragglers
    arrivals = [arrival for subscription in opened for arrival in subscription.received]
    errors = sum(len(subscription.errors) for subscription in opened)
    for subscription in opened:
        subscription.close()
    pipe.send((arrivals, errors))
