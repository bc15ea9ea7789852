"""Real PostgreSQL and Redis for every test run: unique databases and a unique key prefix.

With MEDIAGRAPH_DATABASE_URL / MEDIAGRAPH_REDIS_URL set (as `.ci/run` does) the run
uses those servers; without them it starts the embedded ones. Either way it creates
its own databases and prefix and removes them afterwards, so runs never collide.

With MEDIAGRAPH_TEST_REDIS_CLUSTER=true (or `--redis-cluster`) the run's Redis is a
3-master Redis Cluster the run starts itself (tests/support/redis_cluster.py), and the
app runs with `redis_cluster`: the same tests then check every key family on a cluster.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from sqlalchemy import event
from sqlalchemy.engine import make_url
from starlette.applications import Starlette

from mediagraph.app import create_app
from mediagraph.db.endpoints import Endpoints, async_url
from mediagraph.db.provision import drop_database, provision
from mediagraph.db.shards import routing
from mediagraph.embedded import EmbeddedServers
from mediagraph.services import Services
from mediagraph.settings import Settings
from tests.support.clients import NpmFailed, cache_root, install, registry_reachable
from tests.support.clock import FakeClock
from tests.support.graphql import GraphQLClient
from tests.support.postgres import PostgresMissing, PostgresServer
from tests.support.redis_cluster import RedisClusterServers
from tests.support.servers import LiveServers

pytest_plugins = ["tests.support.browser", "tests.support.suites"]

RUN_ID = uuid.uuid4().hex[:10]
PHYSICAL_SHARDS = 2
CLUSTER_VARIABLE = "MEDIAGRAPH_TEST_REDIS_CLUSTER"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--redis-cluster",
        action="store_true",
        help=f"run against a 3-master Redis Cluster started for the run (or set {CLUSTER_VARIABLE}=true)",
    )


def on_cluster(config: pytest.Config) -> bool:
    flag = os.environ.get(CLUSTER_VARIABLE, "").lower() in ("1", "true", "yes")
    return flag or bool(config.getoption("--redis-cluster"))


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterServers]:
    """A 3-master Redis Cluster of Debian's redis-server, for the whole run."""
    servers = RedisClusterServers(tmp_path_factory.mktemp("redis-cluster")).start()
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture(scope="session")
def second_postgres() -> Iterator[PostgresServer]:
    """A second PostgreSQL server (Debian's initdb, a free loopback port, trust), for the whole run.

    Its `url` names the server's `postgres` database; stopped and removed at the end.
    """
    try:
        server = PostgresServer().init().start()
    except PostgresMissing as missing:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(missing))
    try:
        yield server
    finally:
        server.remove()


def _test_database_urls(server_url: str) -> tuple[str, tuple[str, ...]]:
    base = make_url(async_url(server_url))
    main = base.set(database=f"mgtest_{RUN_ID}").render_as_string(hide_password=False)
    shards = tuple(
        base.set(database=f"mgtest_{RUN_ID}_shard_{n}").render_as_string(hide_password=False)
        for n in range(PHYSICAL_SHARDS)
    )
    return main, shards


@pytest.fixture(scope="session")
def endpoints(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    database_url = os.environ.get("MEDIAGRAPH_DATABASE_URL", "")
    redis_url = os.environ.get("MEDIAGRAPH_REDIS_URL", "")
    if on_cluster(request.config):
        redis_url = request.getfixturevalue("redis_cluster").url
    embedded = None
    if not (database_url and redis_url):
        folder = tmp_path_factory.mktemp("embedded")
        embedded = EmbeddedServers(
            Settings(database_url=database_url, redis_url=redis_url, shard_urls=[], data_dir=folder)
        )
        started = embedded.start()
        database_url, redis_url = started.database_url, started.redis_url
    main, shards = _test_database_urls(database_url)
    resolved = Endpoints(main, shards, redis_url)
    asyncio.run(provision(resolved, logical_shards=64))
    try:
        yield resolved
    finally:
        for url in (main, *shards):
            asyncio.run(drop_database(url))
        if embedded is not None:
            embedded.stop()


@pytest.fixture(scope="session")
def settings(request: pytest.FixtureRequest, endpoints: Endpoints, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(
        database_url=endpoints.database_url,
        shard_urls=list(endpoints.shard_urls),
        redis_url=endpoints.redis_url,
        redis_cluster=on_cluster(request.config),
        redis_prefix=f"mgtest:{RUN_ID}:",
        data_dir=tmp_path_factory.mktemp("data"),
        run_workers=False,
        secret_key=f"test-secret-key-for-this-run-only-{RUN_ID}",
        max_upload_bytes=2 * 1024 * 1024,
        login_attempts_per_username=5,
        login_attempts_per_address=1_000_000,
        # Every read reaches the database, so query counts are exact; tests/test_hot_rows.py
        # covers rows served from memory with servers of their own.
        hot_read_seconds=0,
        # The in-process app lives for the whole run beside live servers: keep its idle
        # connections few (PostgreSQL's default limit is 100 clients).
        db_pool_size=4,
    )


@pytest.fixture(scope="session", autouse=True)
async def redis_cleanup(settings: Settings) -> AsyncIterator[None]:
    yield
    redis = RedisCluster.from_url(settings.redis_url) if settings.redis_cluster else Redis.from_url(settings.redis_url)
    async for key in redis.scan_iter(match=f"{settings.redis_prefix}*", count=1000):
        await redis.delete(key)
    await redis.aclose()


@pytest.fixture(scope="session")
async def app(settings: Settings) -> AsyncIterator[Starlette]:
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture(scope="session")
def services(app: Starlette) -> Services:
    return app.state.services  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://mediagraph.test") as client:
        yield client


@pytest.fixture(scope="session")
def gql(http: httpx.AsyncClient) -> GraphQLClient:
    return GraphQLClient(http)


@pytest.fixture
def clock(services: Services) -> Iterator[FakeClock]:
    """The in-process app's clock, under the test's control (a moment in the future, so
    workers of live servers, on the real clock, never see these sessions as expired)."""
    original = services.clock
    fake = FakeClock(datetime(2031, 3, 14, 12, 0, tzinfo=UTC))
    services.clock = fake
    yield fake
    services.clock = original


# The app's own timers run beside the test: the routing watcher re-reads the shard map every
# `routing_refresh_seconds`, and a statement of its landing mid-request is not the request's.
APP_TIMER_TASKS = frozenset({routing.TASK_NAME})


def _sent_by_the_test() -> bool:
    task = asyncio.current_task()
    return task is None or task.get_name() not in APP_TIMER_TASKS


@pytest.fixture
def count_queries(services: Services) -> Iterator[list[str]]:
    """Every SQL statement sent to the main database or any shard while the test runs."""
    statements: list[str] = []

    def observe(statement: str) -> None:
        if _sent_by_the_test():
            statements.append(statement)

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        observe(statement)

    engines = [services.databases.main, *services.databases.shards]
    for engine in engines:
        event.listen(engine.sync_engine, "before_cursor_execute", record)
    # Hot reads and writes bypass the engines (db/reads.py, db/writes.py): count them too.
    services.databases.main_reads.observers.append(observe)
    services.databases.main_writes.observers.append(observe)
    yield statements
    services.databases.main_writes.observers.remove(observe)
    services.databases.main_reads.observers.remove(observe)
    for engine in engines:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


@pytest.fixture(scope="session")
def installed() -> Path:
    """node_modules of tests/clients (the pinned Node clients and tools), installed once."""
    if shutil.which("node") is None and not os.environ.get("CI"):
        pytest.skip("node is not installed")
    try:
        return install(cache_root())
    except NpmFailed as failure:
        if not os.environ.get("CI") and not registry_reachable():
            pytest.skip(f"npm cannot reach its registry: {failure}")
        raise


@pytest.fixture(scope="module")
def live_servers(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServers]:
    """Starts real `mediagraph serve` processes on demand; all are stopped when the module
    ends, so a whole run never holds more database connections than the server allows."""
    servers = LiveServers(settings, Path(tmp_path_factory.mktemp("live")))
    try:
        yield servers
    finally:
        servers.stop_all()
