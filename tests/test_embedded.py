"""The fresh-machine path: with nothing configured, mediagraph starts its own servers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

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
