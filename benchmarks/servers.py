"""Servers a benchmark drives over real sockets: `mediagraph serve`, and PostGraphile for comparison."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from benchmarks.harness import WORK_DIR
from mediagraph.settings import Settings

POSTGRAPHILE_DIR = WORK_DIR / "postgraphile"
POSTGRAPHILE_VERSION = "postgraphile@4"
START_TIMEOUT_SECONDS = 120


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def settings_environment(settings: Settings) -> dict[str, str]:
    """The environment under which a child `mediagraph` process reads exactly these settings."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MEDIAGRAPH_")}
    for name, value in settings.model_dump().items():
        if isinstance(value, list):
            text = ",".join(str(item) for item in value)
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        env[f"MEDIAGRAPH_{name.upper()}"] = text
    return env


def _wait_until(ready: Callable[[], bool], process: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}:\n{log.read_text()[-4000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if ready():
                return
        time.sleep(0.25)
    raise RuntimeError(f"{what} did not become ready in {START_TIMEOUT_SECONDS} s:\n{log.read_text()[-4000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        # Ctrl-C, as an operator stops it: every child process must follow.
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def mediagraph_server(settings: Settings, *, serve_options: list[str], log: Path) -> Iterator[str]:
    """`mediagraph serve` with these settings and options; yields its base URL once /readyz answers."""
    port = free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "mediagraph", "serve", "--host", "127.0.0.1", "--port", str(port), *serve_options],
            env=settings_environment(settings),
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until(lambda: httpx.get(f"{base}/readyz", timeout=2).status_code == 200, process, log, "mediagraph")
        yield base
    finally:
        _stop(process)


def install_postgraphile(log: Callable[[str], None]) -> Path | None:
    """PostGraphile 4 under benchmarks/.work (installed once, reused); None when npm cannot provide it."""
    executable = POSTGRAPHILE_DIR / "node_modules" / ".bin" / "postgraphile"
    if executable.exists():
        return executable
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        log("Node.js and npm are not installed, so PostGraphile cannot be installed.")
        return None
    POSTGRAPHILE_DIR.mkdir(parents=True, exist_ok=True)
    package = POSTGRAPHILE_DIR / "package.json"
    if not package.exists():
        package.write_text('{"name": "mediagraph-bench-postgraphile", "private": true}\n')
    log(f"installing {POSTGRAPHILE_VERSION} into {POSTGRAPHILE_DIR} (once) ...")
    completed = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", POSTGRAPHILE_VERSION],
        cwd=POSTGRAPHILE_DIR,
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0 or not executable.exists():
        log(f"npm install {POSTGRAPHILE_VERSION} failed: {(completed.stderr or completed.stdout)[-2000:]}")
        return None
    return executable


@contextlib.contextmanager
def postgraphile_server(executable: Path, *, database_url: str, schema: str, log: Path) -> Iterator[str]:
    """PostGraphile's CLI over `schema`; yields its GraphQL URL once it answers."""
    port = free_port()
    node = shutil.which("node") or "node"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                node,
                str(executable.relative_to(POSTGRAPHILE_DIR)),
                "-c",
                database_url,
                "--schema",
                schema,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--disable-graphiql",
                "--disable-query-log",
            ],
            cwd=POSTGRAPHILE_DIR,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/graphql"

    def ready() -> bool:
        return httpx.post(url, json={"query": "{ __typename }"}, timeout=2).status_code == 200

    try:
        _wait_until(ready, process, log, "PostGraphile")
        yield url
    finally:
        _stop(process)


@contextlib.contextmanager
def live_server(settings: Settings, *args: str) -> Iterator[str]:
    """A real `mediagraph serve` process on these settings (no workers unless asked); yields its base URL."""
    # The benchmark process makes ids too (its bulk rows): the server takes another node id.
    server_settings = settings.model_copy(update={"node_id": 900})
    log = WORK_DIR / f"server-{uuid.uuid4().hex[:6]}.log"
    with mediagraph_server(server_settings, serve_options=list(args or ("--no-workers",)), log=log) as base:
        yield base
