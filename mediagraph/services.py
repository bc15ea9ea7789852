"""Process-wide resources: pools, Redis, the event bus, storage, the id generator.

Opened once per process (the Starlette lifespan, a worker, a CLI command) and closed
with it; requests reach them through the context.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from redis.asyncio import Redis

from mediagraph.db.base import utcnow
from mediagraph.db.endpoints import Endpoints
from mediagraph.db.engines import Databases
from mediagraph.db.shards.routing import RoutingWatcher
from mediagraph.ids import SnowflakeGenerator
from mediagraph.keys import KeySpace
from mediagraph.pubsub.bus import EventBus
from mediagraph.redis_pool import redis_client
from mediagraph.settings import Settings
from mediagraph.storage import Storage
from mediagraph.storage.local import LocalStorage


@dataclass
class Services:
    settings: Settings
    endpoints: Endpoints
    databases: Databases
    redis: Redis
    keys: KeySpace
    bus: EventBus
    storage: Storage
    ids: SnowflakeGenerator
    routing: RoutingWatcher
    # The current time for logic that buckets by time (playback statistics); tests
    # replace it to cross minute, hour and day boundaries without waiting.
    clock: Callable[[], datetime] = utcnow

    @classmethod
    async def open(cls, settings: Settings, endpoints: Endpoints) -> Services:
        keys = KeySpace(settings.redis_prefix, sharded_pubsub=settings.redis_cluster)
        databases = Databases(endpoints, settings)
        await databases.start()
        bus = EventBus(
            endpoints.redis_url, keys, max_connections=settings.redis_max_connections, cluster=settings.redis_cluster
        )
        await bus.connect()
        routing = RoutingWatcher(databases, bus, refresh_seconds=settings.routing_refresh_seconds)
        routing.start()
        return cls(
            settings=settings,
            endpoints=endpoints,
            databases=databases,
            redis=redis_client(
                endpoints.redis_url, max_connections=settings.redis_max_connections, cluster=settings.redis_cluster
            ),
            keys=keys,
            bus=bus,
            storage=LocalStorage(settings.media_dir),
            ids=SnowflakeGenerator(settings.node_id),
            routing=routing,
        )

    async def close(self) -> None:
        await self.routing.stop()
        await self.bus.disconnect()
        await self.redis.aclose()
        await self.databases.dispose()
