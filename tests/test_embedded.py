"""The fresh-machine path: with nothing configured, mediagraph starts its own servers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx

from tests.support.servers import free_port

REGISTER = 'mutation { register(username: "embedded_user", password: "long enough") { user { username } } }'


def _environment(data_dir: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MEDIAGRAPH_")}
    env["MEDIAGRAPH_DATA_DIR"] = data_dir
    return env


def _serve(data_dir: str, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "mediagraph", "serve", "--port", str(port), "--no-workers"],
        env=_environment(data_dir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_ready(base: str, process: subprocess.Popen[bytes]) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, "serve exited early"
        try:
            response = httpx.get(f"{base}/readyz", timeout=2)
            if response.status_code == 200:
                return response.json()
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError("embedded server never became ready")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(2)  # Ctrl-C, as a person would stop it
    assert process.wait(timeout=30) == 0


def test_serve_with_nothing_configured_starts_embedded_servers_and_reuses_data(tmp_path):
    data_dir = str(tmp_path / "data")
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    first = _serve(data_dir, port)
    try:
        ready = _wait_ready(base, first)
        assert ready["checks"] == {"postgres": True, "redis": True, "shards": [True, True]}
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
        _wait_ready(base, second)
        again = httpx.post(f"{base}/graphql", json={"query": REGISTER}).json()
        assert again["errors"][0]["extensions"]["code"] == "CONFLICT"
    finally:
        _stop(second)
