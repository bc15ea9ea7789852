from __future__ import annotations

import logging
import signal
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from mediagraph.cli.runtime import configure_logging, provisioned
from mediagraph.workers import registered_workers

if TYPE_CHECKING:
    from mediagraph.demo.traffic import TrafficThread
    from mediagraph.settings import Settings

console = Console(stderr=True)
DEMO_USERS = 8


class Loop(StrEnum):
    uvloop = "uvloop"
    asyncio = "asyncio"


class HTTPParser(StrEnum):
    httptools = "httptools"
    h11 = "h11"


def serve(
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8000,
    demo: Annotated[bool, typer.Option(help="Load sample users and media before serving.")] = False,
    traffic: Annotated[
        bool, typer.Option(help="With the demo data, keep generating activity through the API while serving.")
    ] = False,
    traffic_rate: Annotated[float, typer.Option(min=0.1, max=200, help="--traffic: actions a second.")] = 4.0,
    workers: Annotated[
        bool, typer.Option("--workers/--no-workers", help="Run the background workers (in a process of their own).")
    ] = True,
    processes: Annotated[
        int, typer.Option(min=1, help="Server processes sharing the port (SO_REUSEPORT); one per core in production.")
    ] = 1,
    loop: Annotated[Loop, typer.Option(help="Event loop.")] = Loop.uvloop,
    http: Annotated[HTTPParser, typer.Option(help="HTTP parser.")] = HTTPParser.httptools,
) -> None:
    """Serve GraphQL (and GraphiQL) with PostgreSQL and Redis, embedded when none is configured."""
    from mediagraph.cli.processes import ServerOptions, run_server, serve_processes

    configure_logging()
    signal.signal(signal.SIGTERM, _exit_cleanly)
    with provisioned() as (settings, _):
        if demo or traffic:
            from mediagraph.cli.admin import load_demo

            load_demo(settings, users=DEMO_USERS, media=120)
        settings = settings.model_copy(update={"run_workers": workers})
        if settings.metrics_port == port:
            raise typer.BadParameter("MEDIAGRAPH_METRICS_PORT must differ from --port")
        options = ServerOptions(
            host=host, port=port, loop=loop.value, http=http.value, metrics_port=settings.metrics_port
        )
        banner = f"mediagraph at http://{host}:{port}/graphql ({processes} process(es))"
        if settings.log_format == "json":
            # Every line of a JSON log must parse.
            logging.getLogger("mediagraph").info(banner)
        else:
            console.print(f"[bold]{banner}[/]")
        beside = _start_traffic(settings, host, port, traffic_rate) if traffic else None
        try:
            if processes == 1 and not workers:
                run_server(settings, options)
            elif status := serve_processes(settings, options, processes):
                raise typer.Exit(status)
        finally:
            if beside is not None:
                beside.stop()


def _start_traffic(settings: Settings, host: str, port: int, rate: float) -> TrafficThread:
    from mediagraph.demo.traffic import TrafficOptions, TrafficThread

    # The server is reached on the loopback whatever address it binds.
    local = "[::1]" if ":" in host else "127.0.0.1"
    thread = TrafficThread(
        f"http://{local}:{port}", settings, TrafficOptions(actions_per_second=rate), users=DEMO_USERS
    )
    thread.start()
    return thread


def _exit_cleanly(signum: int, frame: object) -> None:
    # uvicorn re-raises the SIGTERM it caught once it has shut down; by default that
    # kills the process on the spot, before the embedded servers are stopped.
    raise SystemExit(0)


def worker(name: Annotated[str, typer.Argument(help="Which worker to run.")]) -> None:
    """Run one background worker until interrupted (for deployments that run `serve --no-workers`)."""
    configure_logging()
    known = registered_workers()
    if name not in known:
        raise typer.BadParameter(f"unknown worker {name!r}; known: {', '.join(sorted(known)) or 'none'}")
    from mediagraph.cli.processes import run_background_workers

    with provisioned() as (settings, _):
        run_background_workers(settings, loop=Loop.asyncio.value, names=[name])
