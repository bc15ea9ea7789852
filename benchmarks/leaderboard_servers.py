"""Real `mediagraph serve` processes for the leaderboard benchmark, on the benchmark's databases."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from benchmarks.servers import mediagraph_server
from mediagraph.settings import Settings


@contextlib.contextmanager
def servers(settings: Settings, count: int) -> Iterator[list[str]]:
    """`count` API processes without workers; their base URLs once all answer /readyz."""
    with contextlib.ExitStack() as stack:
        urls = []
        for n in range(count):
            # The PostgreSQL server is shared: a few connections per process keep two cores busy.
            server_settings = settings.model_copy(update={"node_id": 200 + n, "db_pool_size": 4, "db_max_overflow": 4})
            # Kept under benchmarks/.work, for when a run reports failed requests.
            log = settings.data_dir / f"server-{n}.log"
            urls.append(
                stack.enter_context(mediagraph_server(server_settings, serve_options=["--no-workers"], log=log))
            )
        yield urls
