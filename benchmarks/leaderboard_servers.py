"""Real `mediagraph serve` processes for the leaderboard benchmark, on the benchmark's databases."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx

from mediagraph.settings import Settings


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _environment(settings: Settings, node_id: int) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MEDIAGRAPH_")}
    env.update(
        {
            "MEDIAGRAPH_DATABASE_URL": settings.database_url,
            "MEDIAGRAPH_SHARD_URLS": ",".join(settings.shard_urls),
            "MEDIAGRAPH_REDIS_URL": settings.redis_url,
            "MEDIAGRAPH_REDIS_PREFIX": settings.redis_prefix,
            "MEDIAGRAPH_SECRET_KEY": settings.secret_key,
            "MEDIAGRAPH_DATA_DIR": str(settings.data_dir),
            "MEDIAGRAPH_NODE_ID": str(node_id),
            # The PostgreSQL server is shared: a few connections per process keep two cores busy.
            "MEDIAGRAPH_DB_POOL_SIZE": "4",
            "MEDIAGRAPH_DB_MAX_OVERFLOW": "4",
        }
    )
    return env


@contextlib.contextmanager
def servers(settings: Settings, count: int) -> Iterator[list[str]]:
    """`count` API processes without workers; their base URLs once all answer /readyz."""
    processes: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        for n in range(count):
            port = _free_port()
            # Kept under benchmarks/.work, for when a run reports failed requests.
            log = (settings.data_dir / f"server-{n}.log").open("wb")
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "mediagraph", "serve", "--no-workers", "--port", str(port)],
                    env=_environment(settings, 200 + n),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            urls.append(f"http://127.0.0.1:{port}")
        for process, url in zip(processes, urls, strict=True):
            _wait_ready(process, url)
        yield urls
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()


def _wait_ready(process: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server {url} exited with {process.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"server {url} did not become ready")
