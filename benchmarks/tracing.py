"""`mediagraph bench tracing`: what observability costs the by-id read, in one run.

Three servers read the same rows, with metrics on (counted, sampled, served to a
token) in each:
- OpenTelemetry absent: a Python environment of the project without the `otel` extra
  (built once per run with uv);
- installed, off: this environment, with no OTEL_* variables;
- on: this environment, exporting every request's spans over OTLP/HTTP to a receiver
  in this process that accepts and drops them (as a collector on another machine would
  accept them, minus its work).
wrk drives each in turn with the same by-id requests for several rounds, the order
rotating each round, so a shared machine's drifts spread over all three.

Each round starts every server afresh. One Python process runs a few per cent faster
or slower than another running the same code (its hash seed and memory layout): four
identical servers measured side by side for four rounds kept their places, spanning
0.89x to 1.00x. A server kept for the whole run would carry its luck into every round
and pass it off as the variant's cost; fresh ones spread it over the rounds. The three
servers of a round share one hash seed (`PYTHONHASHSEED`, drawn anew each round), so
the part of that luck which comes from string hashing is the same for all three.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from benchmarks import http_data
from benchmarks.harness import WORK_DIR, bench_settings, console, report
from benchmarks.http_workloads import BY_ID, MEDIAGRAPH
from benchmarks.servers import mediagraph_process
from benchmarks.wrk import INSTALL_HINT, LoadResult, bodies_load, run_wrk, write_bodies, wrk_path
from mediagraph.ids import to_global_id

PROJECT_ROOT = Path(__file__).resolve().parent.parent
WARM_UP_SECONDS = 3
METRICS_TOKEN = "bench-metrics-token"


@dataclass(frozen=True)
class Options:
    media: int
    seconds: float
    rounds: int
    connections: int


@dataclass(frozen=True)
class Variant:
    name: str
    python: str
    environment: dict[str, str]


class SpanSink:
    """Accepts OTLP/HTTP exports and drops them; counts what arrived."""

    def __init__(self) -> None:
        self.exports = 0
        self.bytes = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                self.rfile.read(length)
                sink.exports += 1
                sink.bytes += length
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def python_without_otel(folder: Path) -> str:
    """A virtual environment with the project and its runtime dependencies only (no extras)."""
    uv = shutil.which("uv")
    if uv is None:
        raise SystemExit("bench tracing builds an environment without OpenTelemetry with uv; install uv")
    environment = folder / "without-otel"
    python = environment / "bin" / "python"
    console.print(f"building an environment without the otel extra in {environment} ...")
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(environment)], check=True)
    subprocess.run([uv, "pip", "install", "--quiet", "--python", str(python), str(PROJECT_ROOT)], check=True)
    probe = subprocess.run([str(python), "-c", "import opentelemetry"], capture_output=True, check=False)
    if probe.returncode == 0:
        raise SystemExit(f"{environment} has OpenTelemetry installed; it cannot stand for its absence")
    return str(python)


def run(options: Options) -> None:
    if wrk_path() is None:
        console.print(f"[red]{INSTALL_HINT}[/]")
        raise SystemExit(2)
    try:
        import opentelemetry.sdk  # noqa: F401
    except ImportError:
        raise SystemExit("this environment lacks the otel extra: uv sync --extra otel (or the dev group)") from None
    with bench_settings(
        "tracing", environment="production", secret_key=os.urandom(24).hex(), metrics_token=METRICS_TOKEN
    ) as settings:
        folder = WORK_DIR / f"tracing-{settings.redis_prefix.split(':')[2]}"
        folder.mkdir(parents=True, exist_ok=True)
        console.print(f"loading {options.media:,} media ...")
        asyncio.run(http_data.load(settings.database_url, media=options.media, users=100))
        ids = asyncio.run(http_data.sample_media_ids(settings.database_url, options.media))
        query = BY_ID.document(MEDIAGRAPH)
        load = bodies_load(
            write_bodies(
                folder / "by-id.jsonl", [{"query": query, "variables": {"id": to_global_id("Media", i)}} for i in ids]
            )
        )
        sink = SpanSink()
        quiet = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
        variants = [
            Variant("OpenTelemetry absent", python_without_otel(folder), quiet),
            Variant("installed, tracing off", sys.executable, quiet),
            Variant(
                "tracing on (OTLP)",
                sys.executable,
                {**quiet, "OTEL_EXPORTER_OTLP_ENDPOINT": sink.url, "OTEL_SERVICE_NAME": "mediagraph-bench"},
            ),
        ]
        results: dict[str, list[LoadResult]] = {variant.name: [] for variant in variants}
        try:
            for round_number in range(options.rounds):
                shift = round_number % len(variants)
                seed = {"PYTHONHASHSEED": str(random.randrange(1, 2**32))}
                for variant in variants[shift:] + variants[:shift]:
                    with _server(
                        settings, replace(variant, environment={**variant.environment, **seed}), folder
                    ) as url:
                        run_wrk(url, load, connections=options.connections, seconds=WARM_UP_SECONDS)
                        result = run_wrk(url, load, connections=options.connections, seconds=options.seconds)
                        results[variant.name].append(result)
                        console.print(
                            f"round {round_number + 1}/{options.rounds} {variant.name:<24} "
                            f"{result.requests_per_second:>9,.0f} req/s  p50 {result.p50_ms:6.2f} ms  "
                            f"p99 {result.p99_ms:7.2f} ms  failures {result.failures + result.socket_errors}"
                        )
        finally:
            sink.close()
            for path in load.arguments:
                path.unlink(missing_ok=True)
    _report(results, options, sink)


@contextmanager
def _server(settings: Any, variant: Variant, folder: Path) -> Any:
    slug = variant.name.split()[0].lower() + ("-on" if "on (" in variant.name else "")
    with mediagraph_process(
        settings,
        serve_options=["--processes", "1", "--loop", "uvloop", "--http", "httptools"],
        log=folder / f"mediagraph-{slug}.log",
        python=variant.python,
        environment=variant.environment,
    ) as server:
        yield f"{server.base}/graphql"


def _report(results: dict[str, list[LoadResult]], options: Options, sink: SpanSink) -> None:
    medians = {name: statistics.median(r.requests_per_second for r in runs) for name, runs in results.items()}
    absent = next(iter(medians.values()))
    rows = [
        [
            name,
            f"{medians[name]:,.0f}",
            f"{statistics.median(r.p50_ms for r in runs):.2f}",
            f"{statistics.median(r.p99_ms for r in runs):.2f}",
            f"{medians[name] / absent:.3f}",
            f"{min(r.requests_per_second for r in runs):,.0f}–{max(r.requests_per_second for r in runs):,.0f}",
            sum(r.failures + r.socket_errors for r in runs),
        ]
        for name, runs in results.items()
    ]
    report(
        f"media by id, one process each, metrics on; {options.media:,} media, {options.connections} connections, "
        f"{options.rounds} rounds of {options.seconds:g} s, medians; {sink.exports:,} OTLP exports received",
        ["server", "req/s", "p50 ms", "p99 ms", "vs absent", "range req/s", "failures"],
        rows,
    )
