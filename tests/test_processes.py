"""`serve --processes N`: every process listens on the port itself, the workers run in a process
of their own, and Ctrl-C stops them all."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from mediagraph.cli.processes import process_settings
from mediagraph.settings import Settings
from tests.support.servers import child_pids, free_port, wait_ready

ME = {"query": "{ me { id } }"}


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes


def _sockets_of(pid: int) -> set[str]:
    sockets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            sockets.add(target[len("socket:[") : -1])
    return sockets


def _serve(live_servers, port: int, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "mediagraph", "serve", "--port", str(port), "--no-workers", *args],
        env=live_servers.environment(MEDIAGRAPH_NODE_ID="900"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_listeners(port: int, count: int) -> set[str]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        inodes = _listening_inodes(port)
        if len(inodes) >= count:
            return inodes
        time.sleep(0.2)
    raise AssertionError(f"fewer than {count} sockets listen on {port}")


@pytest.fixture
def two_processes(live_servers):
    port = free_port()
    process = _serve(live_servers, port, "--processes", "2")
    try:
        wait_ready(f"http://127.0.0.1:{port}", process)
        yield port, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=60)


def test_each_process_listens_on_the_port_itself(two_processes):
    port, process = two_processes
    inodes = _wait_listeners(port, 2)
    owners = {pid for pid in child_pids(process.pid) if _sockets_of(pid) & inodes}
    assert len(owners) == 2
    assert not _sockets_of(process.pid) & inodes, "the supervising parent must not accept connections"
    for _ in range(10):
        # A fresh connection each time, so the kernel may pick either process.
        assert httpx.post(f"http://127.0.0.1:{port}/graphql", json=ME).json() == {"data": {"me": None}}


def test_ctrl_c_stops_every_process_and_frees_the_port(two_processes):
    port, process = two_processes
    children = [pid for pid in child_pids(process.pid) if _sockets_of(pid)]
    assert children
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 0
    for pid in children:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_ctrl_c_while_the_processes_are_still_starting_is_a_clean_stop(live_servers):
    process = _serve(live_servers, free_port(), "--processes", "2")
    try:
        deadline = time.monotonic() + 30
        while len(child_pids(process.pid)) < 2:
            assert time.monotonic() < deadline, "the server processes were not started"
            time.sleep(0.01)
        # The children are still importing: nothing serves yet, and stopping now is no failure.
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_processes_stop_when_their_parent_is_killed(two_processes):
    port, process = two_processes
    children = [pid for pid in child_pids(process.pid) if _sockets_of(pid)]
    assert children
    process.kill()
    process.wait()
    deadline = time.monotonic() + 60
    while _listening_inodes(port):
        assert time.monotonic() < deadline, "orphaned processes still listen"
        time.sleep(0.2)


def test_a_taken_port_fails_at_start(live_servers):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = _serve(live_servers, port, "--processes", "2")
        assert process.wait(timeout=60) != 0


def test_each_process_gets_its_own_node_id_and_the_workers_a_process_of_their_own():
    settings = Settings(node_id=10, run_workers=True)
    children = process_settings(settings, 3)
    assert [child.node_id for child in children] == [10, 11, 12, 13]
    assert [child.run_workers for child in children] == [False, False, False, True]
    without = process_settings(settings.model_copy(update={"run_workers": False}), 2)
    assert [(child.node_id, child.run_workers) for child in without] == [(10, False), (11, False)]
    with pytest.raises(ValueError, match="node ids"):
        process_settings(Settings(node_id=1022, run_workers=True), 2)
    assert [child.node_id for child in process_settings(Settings(node_id=1022, run_workers=False), 2)] == [1022, 1023]


def _spawned(pid: int) -> list[int]:
    """The parent's server and workers processes (not multiprocessing's resource tracker)."""
    return [child for child in child_pids(pid) if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()]


def _workers_beating(base: str) -> bool:
    workers = httpx.get(f"{base}/readyz", timeout=5).json()["checks"]["workers"]
    return bool(workers) and all(state["ok"] for state in workers.values())


def test_the_workers_run_in_a_process_of_their_own_and_its_death_stops_the_server(live_servers):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "mediagraph", "serve", "--port", str(port)],
        env=live_servers.environment(MEDIAGRAPH_NODE_ID="900"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(base, process)
        inodes = _wait_listeners(port, 1)
        spawned = _spawned(process.pid)
        assert len(spawned) == 2
        servers = [pid for pid in spawned if _sockets_of(pid) & inodes]
        workers = [pid for pid in spawned if pid not in servers]
        assert len(servers) == 1
        assert len(workers) == 1
        deadline = time.monotonic() + 60
        while not _workers_beating(base):
            assert time.monotonic() < deadline, "the workers never reported in"
            time.sleep(0.3)
        assert httpx.post(f"{base}/graphql", json=ME).json() == {"data": {"me": None}}
        # A server left without its workers would count views nobody flushes: all of it stops.
        os.kill(workers[0], signal.SIGKILL)
        assert process.wait(timeout=60) != 0
        deadline = time.monotonic() + 60
        while _listening_inodes(port):
            assert time.monotonic() < deadline, "the server process outlived its workers"
            time.sleep(0.2)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_recommended_processes_leave_a_core_to_a_local_postgresql():
    from mediagraph.cli.processes import recommended_processes

    assert recommended_processes("postgresql://postgres@127.0.0.1:5432/db", cores=2) == 1
    assert recommended_processes("postgresql+asyncpg://postgres@/db?host=/tmp/pg", cores=4) == 3
    assert recommended_processes("postgresql://db.internal:5432/db", cores=2) == 2
    assert recommended_processes("postgresql://localhost/db", cores=1) == 1
