"""A PostgreSQL server of the run's own, from Debian's binaries, for layouts that need a second server.

`initdb` runs as the `postgres` user (PostgreSQL refuses to run as root) in a temporary
folder, with trust authentication, and the server listens on a free loopback port only.
Tests may stop it (`pg_ctl stop -m immediate` is a crash) and start it again on the same port.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.servers import free_port


class PostgresMissing(RuntimeError):
    """Debian's PostgreSQL server binaries are not installed."""


def postgres_binary(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise PostgresMissing(f"PostgreSQL's {name} is not installed (apt-get install postgresql)")
    return found[-1]


class PostgresServer:
    def __init__(self) -> None:
        postgres_binary("initdb")  # fail before making anything
        # Not under pytest's temporary folders: those are private to root, and the server runs as postgres.
        self.folder = Path(tempfile.mkdtemp(prefix="mediagraph-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *command: str) -> None:
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*as_postgres, *command], check=True, capture_output=True, timeout=120)

    def init(self) -> PostgresServer:
        os.chmod(self.folder, 0o755)
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        self._run(postgres_binary("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        return self

    def start(self) -> PostgresServer:
        # The socket folder is ours too: the system one may belong to another server's user.
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.folder / "log")
        self._run(postgres_binary("pg_ctl"), "-D", str(self.data), "-o", options, "-l", log, "-w", "start")
        self._wait_until_listening()
        return self

    def stop(self, mode: str = "fast") -> None:
        """`fast` is a clean shutdown; `immediate` a crash (no shutdown checkpoint, clients cut off)."""
        self._run(postgres_binary("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def remove(self) -> None:
        if self.listening():
            self.stop("fast")
        shutil.rmtree(self.folder, ignore_errors=True)

    def _wait_until_listening(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not self.listening():
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not listen on port {self.port}")
            time.sleep(0.05)
