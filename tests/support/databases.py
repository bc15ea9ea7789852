"""Databases of a test module's own, for live views that count everything in them.

Today's hot media rank every media created today, so on the run's shared databases
they depend on what other tests did. A module that must see exactly its own media
provisions a main database and one shard of its own and points its servers there.
A module that runs comments on two PostgreSQL servers provisions a layout spanning them.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import make_url

from mediagraph.db.endpoints import Endpoints, async_url
from mediagraph.db.provision import drop_database, provision
from mediagraph.settings import Settings


@contextmanager
def private_databases(settings: Settings, name: str) -> Iterator[dict[str, str]]:
    """The environment of a server on fresh databases and a Redis prefix of their own."""
    suffix = f"{name}_{uuid.uuid4().hex[:6]}"
    base = make_url(settings.database_url)
    main = base.set(database=f"{base.database}_{suffix}").render_as_string(hide_password=False)
    shard = base.set(database=f"{base.database}_{suffix}_shard").render_as_string(hide_password=False)
    endpoints = Endpoints(main, (shard,), settings.redis_url)
    asyncio.run(provision(endpoints, logical_shards=settings.logical_shards))
    try:
        yield {
            "MEDIAGRAPH_DATABASE_URL": main,
            "MEDIAGRAPH_SHARD_URLS": shard,
            # Under the run's own prefix, so the run's cleanup removes these keys too.
            "MEDIAGRAPH_REDIS_PREFIX": f"{settings.redis_prefix}{suffix}:",
        }
    finally:
        for url in (main, shard):
            asyncio.run(drop_database(url))


@contextmanager
def databases_on_two_servers(settings: Settings, second_server_url: str, name: str) -> Iterator[Endpoints]:
    """A main database and physical shard 0 on the run's server, physical shard 1 on another server.

    Provisioned from nothing as `mediagraph migrate` does it: each URL's database is created
    on its own server, migrated, and the logical shards spread round robin over both.
    """
    suffix = f"{name}_{uuid.uuid4().hex[:6]}"
    here = make_url(settings.database_url)
    there = make_url(async_url(second_server_url))
    main = here.set(database=f"{here.database}_{suffix}").render_as_string(hide_password=False)
    first = here.set(database=f"{here.database}_{suffix}_shard_0").render_as_string(hide_password=False)
    second = there.set(database=f"mgtest_{suffix}_shard_1").render_as_string(hide_password=False)
    endpoints = Endpoints(main, (first, second), settings.redis_url)
    asyncio.run(provision(endpoints, logical_shards=settings.logical_shards))
    try:
        yield endpoints
    finally:
        for url in (main, first, second):
            asyncio.run(drop_database(url))
