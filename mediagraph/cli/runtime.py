"""What every command needs first: settings, and the servers (configured or embedded)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

from mediagraph.db.endpoints import Endpoints
from mediagraph.db.provision import provision
from mediagraph.embedded import resolve_endpoints
from mediagraph.services import Services
from mediagraph.settings import Settings, get_settings


def configure_logging(level: str | None = None, settings: Settings | None = None) -> None:
    """The settings' log format and level (or `level`); see observability/logs.py."""
    from mediagraph.observability.logs import configure_logging as configure

    configure(settings, level=level)


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
