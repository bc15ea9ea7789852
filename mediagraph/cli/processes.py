"""`serve --processes N`: N server processes sharing one port, each accepting its own
connections, and the background workers in a process of their own.

Every server process binds the port itself with SO_REUSEPORT, so the kernel spreads new
connections over the processes (a shared listening socket, as uvicorn's
`--workers` uses, lets one busy process take most keep-alive connections).
The workers' batches (a roll-up of tens of thousands of counters, a flush, a read of
the engagement stream) run on another core instead of between the requests of a
server's event loop. The parent has already started any embedded servers and migrated;
it only supervises: each process gets its own Snowflake node id, and Ctrl-C (or
SIGTERM) stops them all, as does any of them exiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.process import BaseProcess

from mediagraph.ids import NODE_BITS
from mediagraph.observability.exposition import MultiprocessFolder
from mediagraph.settings import Settings

log = logging.getLogger(__name__)

STOP_TIMEOUT_SECONDS = 15.0


@dataclass(frozen=True)
class ServerOptions:
    host: str
    port: int
    loop: str
    http: str
    # A second listener, for /metrics alone (MEDIAGRAPH_METRICS_PORT).
    metrics_port: int | None = None


LOCAL_HOSTS = {"", "localhost", "127.0.0.1", "::1"}


def recommended_processes(database_url: str, cores: int | None = None) -> int:
    """One process per core, less one for PostgreSQL when it runs on this machine.

    Measured on 2 cores with PostgreSQL beside the server: a second API process adds
    throughput, but starves PostgreSQL's backends of CPU, and the slowest reads then
    wait hundreds of milliseconds (see BENCHMARKS.md).
    """
    from sqlalchemy.engine import make_url

    cores = cores or os.cpu_count() or 1
    url = make_url(database_url)
    local = (url.host or "") in LOCAL_HOSTS or "host" in url.query
    return max(1, cores - 1) if local else cores


def bind_reuseport(host: str, port: int, *, reuse_port: bool = True) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def listeners(options: ServerOptions, *, reuse_port: bool) -> list[socket.socket]:
    """This process's sockets: the main port, and the metrics port when there is one."""
    ports = [options.port] if options.metrics_port is None else [options.port, options.metrics_port]
    return [bind_reuseport(options.host, port, reuse_port=reuse_port) for port in ports]


def run_server(settings: Settings, options: ServerOptions, sockets: list[socket.socket] | None = None) -> None:
    """One server process: uvicorn on this process's own sockets (or binding host and port itself).

    Exits 0 when stopped by SIGINT or SIGTERM (uvicorn re-raises the signal once it has
    shut down gracefully), and with uvicorn's startup-failure status if it never started.
    """
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE

    from mediagraph.app import create_app
    from mediagraph.serving.transport import CoalescingHttpToolsProtocol

    http = CoalescingHttpToolsProtocol if options.http == "httptools" else options.http
    config = uvicorn.Config(
        create_app(settings),
        host=options.host,
        port=options.port,
        loop=options.loop,
        http=http,
        # Compression would keep a zlib context per socket (hundreds of KB at 10,000
        # subscribers each) to squeeze messages of a few dozen bytes.
        ws_per_message_deflate=False,
        # Records go to the root logger's handler (observability/logs.py): text or JSON like the rest.
        log_config=None,
        log_level=settings.log_level.lower(),
        access_log=False,
        timeout_graceful_shutdown=5,
        # Ours, always passed: uvicorn's own FORWARDED_ALLOW_IPS must not widen whom we trust.
        proxy_headers=True,
        forwarded_allow_ips=settings.forwarded_allow_ips,
    )
    server = uvicorn.Server(config)
    previous = signal.signal(signal.SIGTERM, _exit_quietly)
    if sockets is None and options.metrics_port is not None:
        sockets = listeners(options, reuse_port=False)
    try:
        server.run(sockets=sockets)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not server.started:
        sys.exit(STARTUP_FAILURE)


def _exit_quietly(_signum: int, _frame: object) -> None:
    sys.exit(0)


def _child(settings: Settings, options: ServerOptions) -> None:
    _start_child(settings)
    run_server(settings, options, listeners(options, reuse_port=True))


def _workers_child(settings: Settings, options: ServerOptions) -> None:
    _start_child(settings)
    # Ctrl-C in a terminal reaches this process too, maybe before the loop takes SIGINT over.
    with contextlib.suppress(KeyboardInterrupt):
        run_background_workers(settings, loop=options.loop)


def _start_child(settings: Settings) -> None:
    """What every child does first: log as the parent does, and watch the parent."""
    from mediagraph.cli.runtime import configure_logging

    configure_logging(settings=settings)
    # The parent forwards SIGTERM; Ctrl-C in a terminal reaches every process of the group.
    # A parent killed outright (SIGKILL, OOM) forwards nothing, so each process also stops
    # gracefully once its parent is gone, instead of running on as an orphan.
    threading.Thread(target=_stop_with_parent, name="parent-watch", daemon=True).start()


def run_background_workers(settings: Settings, *, loop: str, names: list[str] | None = None) -> None:
    """The background workers (`names`, else all) until SIGINT or SIGTERM, on `loop`."""
    main = _background_workers(settings, names)
    if loop == "uvloop":
        import uvloop

        uvloop.run(main)
    else:
        asyncio.run(main)


async def _background_workers(settings: Settings, names: list[str] | None) -> None:
    from mediagraph.cli.runtime import open_services
    from mediagraph.db.endpoints import configured_endpoints
    from mediagraph.serving.memory import tune_for_serving
    from mediagraph.workers import run_workers

    stopped = asyncio.Event()
    running = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        running.add_signal_handler(signum, stopped.set)
    async with open_services(settings, configured_endpoints(settings)) as services:
        tune_for_serving()
        async with run_workers(services, enabled=True, names=names):
            await stopped.wait()


def _stop_with_parent() -> None:
    parent = multiprocessing.parent_process()
    if parent is not None:
        multiprocessing.connection.wait([parent.sentinel])
        os.kill(os.getpid(), signal.SIGTERM)


def process_settings(settings: Settings, processes: int) -> list[Settings]:
    """Each process's settings, each with its own node id: the server processes, none running
    workers, then (when workers run) the workers' process, the one with `run_workers` set."""
    count = processes + (1 if settings.run_workers else 0)
    last = settings.node_id + count - 1
    if last >= 1 << NODE_BITS:
        raise ValueError(
            f"node ids {settings.node_id}..{last} do not fit in {NODE_BITS} bits; lower MEDIAGRAPH_NODE_ID"
        )
    return [
        settings.model_copy(update={"node_id": settings.node_id + n, "run_workers": n == processes})
        for n in range(count)
    ]


def serve_processes(settings: Settings, options: ServerOptions, processes: int) -> int:
    """Run the processes until a signal or the first one exits; returns the exit status."""
    # Fail here, not in every child, if a port is taken by something without SO_REUSEPORT.
    try:
        for sock in listeners(options, reuse_port=True):
            sock.close()
    except OSError as error:
        reason = "address already in use" if error.errno == errno.EADDRINUSE else str(error)
        log.error("cannot listen on %s port %s: %s", options.host, options.port, reason)
        return 1
    # Created before the processes start, so each imports prometheus-client in multiprocess mode.
    metrics_folder = MultiprocessFolder()
    spawn = multiprocessing.get_context("spawn")
    children: list[BaseProcess] = [
        spawn.Process(
            target=_workers_child if child.run_workers else _child,
            args=(child, options),
            name="mediagraph-workers" if child.run_workers else f"mediagraph-{n}",
            daemon=False,
        )
        for n, child in enumerate(process_settings(settings, processes))
    ]
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        for child in children:
            child.start()
        while not stopping and all(child.is_alive() for child in children):
            time.sleep(0.2)
        if not stopping:
            exited = ", ".join(child.name for child in children if not child.is_alive())
            log.error("%s exited; stopping the others", exited)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _stop(children)
        metrics_folder.remove()
    # A process still starting when the stop came (importing, before it could take SIGTERM
    # as a graceful stop) dies of the signal itself: it served nothing, and that is no failure.
    stopped = (0, None, -signal.SIGTERM, -signal.SIGINT) if stopping else (0, None)
    failed = [child.exitcode for child in children if child.exitcode not in stopped]
    return 0 if stopping and not failed else 1


def _stop(children: list[BaseProcess]) -> None:
    for child in children:
        if child.is_alive() and child.pid is not None:
            # SIGTERM after a terminal's SIGINT is still a graceful stop for uvicorn.
            child.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.kill()
            child.join()
