"""Faults on real servers: the API server killed, Redis killed, the main PostgreSQL restarted,
one comment shard's server down. Each test starts (and stops) the servers it breaks."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import asyncpg
import httpx
import pytest

from mediagraph.db.endpoints import Endpoints, async_url
from mediagraph.db.provision import drop_database, provision
from mediagraph.settings import Settings
from tests.support.apps import private_prefix
from tests.support.comments import raw_media_id
from tests.support.factories import ADD_COMMENT, RECORD_VIEW, create_user, upload
from tests.support.faults import DurableRedis
from tests.support.graphql import GraphQLClient, WebSocketClient

pytestmark = pytest.mark.slow

VIEW_COUNT = "query($id: ID!) { media(id: $id) { viewCount } }"
VIEW_COUNT_LIVE = "subscription($id: ID!) { viewCount(mediaId: $id) { viewCount } }"
PAGE = """
query($tags: [String!]) {
  mediaList(tags: $tags, first: 50) {
    edges { node { id title viewCount commentCount comments(first: 3) { edges { node { content } } } } }
  }
}
"""


@dataclass
class ViewLoad:
    """Anonymous views of one media, each by a viewer of its own, from a few concurrent clients."""

    base: str
    media_id: str
    acknowledged: int = 0
    # Requests that reached a server: acknowledged, refused, or cut off in flight.
    attempted: int = 0
    failures: list[dict] = field(default_factory=list)
    # When each failed request was sent (monotonic): a response may be read well after that.
    failures_sent_at: list[float] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, clients: int = 8) -> None:
        await asyncio.gather(*(self._client(n) for n in range(clients)))

    async def _client(self, n: int) -> None:
        async with httpx.AsyncClient(base_url=self.base, timeout=10) as http:
            while not self.stop.is_set():
                self.attempted += 1
                sent_at = time.monotonic()
                try:
                    response = await http.post(
                        "/graphql",
                        json={"query": RECORD_VIEW, "variables": {"id": self.media_id}},
                        headers={"user-agent": f"fault-{uuid.uuid4().hex}"},
                    )
                except httpx.ConnectError:
                    self.attempted -= 1  # never reached a server: it cannot have been counted
                    await asyncio.sleep(0.05)
                    continue
                except httpx.TransportError:
                    await asyncio.sleep(0.05)  # cut off in flight: it may or may not have been counted
                    continue
                body = response.json()
                if body.get("errors"):
                    self.failures.append(body["errors"][0])
                    self.failures_sent_at.append(sent_at)
                    await asyncio.sleep(0.05)
                elif body["data"]["recordView"]["counted"]:
                    self.acknowledged += 1

    def failures_sent_since(self, moment: float) -> list[dict]:
        return [error for sent, error in zip(self.failures_sent_at, self.failures, strict=True) if sent >= moment]

    async def until(self, acknowledged: int, timeout: float = 120) -> None:  # noqa: ASYNC109 - a bounded wait
        deadline = time.monotonic() + timeout
        while self.acknowledged < acknowledged:
            assert time.monotonic() < deadline, f"only {self.acknowledged} views acknowledged"
            await asyncio.sleep(0.05)


async def _media(base: str) -> tuple[str, str]:
    """A user's token and a media, made through the server at `base`."""
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        token, _ = await create_user(GraphQLClient(http))
        response = await upload(http, token=token, title="Under fault")
        return token, response.json()["data"]["uploadMedia"]["id"]


async def _view_count(base: str, media_id: str) -> int:
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        return (await GraphQLClient(http).ok(VIEW_COUNT, {"id": media_id}))["media"]["viewCount"]


async def _flushed_count(database_url: str, media_id: str) -> int:
    connection = await asyncpg.connect(database_url)
    try:
        value = await connection.fetchval(
            "SELECT view_count FROM media_view_count WHERE media_id = $1", raw_media_id(media_id)
        )
        return int(value or 0)
    finally:
        await connection.close()


async def _settled(base: str, database_url: str, media_id: str, timeout: float = 120) -> int:  # noqa: ASYNC109
    """The view count once every counted view has reached PostgreSQL (the API and the table agree)."""
    deadline = time.monotonic() + timeout
    while True:
        shown = await _view_count(base, media_id)
        stored = await _flushed_count(database_url, media_id)
        if shown == stored:
            return stored
        assert time.monotonic() < deadline, f"the API shows {shown} views, PostgreSQL holds {stored}"
        await asyncio.sleep(0.25)


def _plain_url(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def test_kill_9_of_the_server_under_view_load_keeps_every_acknowledged_view_once(
    live_servers, settings, record_property
):
    # A short flush lease: a flush cut short by the kill is taken over within seconds.
    base = live_servers.start(MEDIAGRAPH_VIEW_FLUSH_LEASE_SECONDS="3")
    _, media_id = await _media(base)
    load = ViewLoad(base, media_id)
    running = asyncio.create_task(load.run())
    try:
        await load.until(150)
        await asyncio.sleep(1.5)  # at least one flush to PostgreSQL has run under load
        # The server processes and the workers' process (a flush cut short) alike.
        live_servers.kill_9(base)
        acknowledged = load.acknowledged
    finally:
        load.stop.set()
        await running
    attempted = load.attempted
    live_servers.start_again(base)
    stored = await _settled(base, _plain_url(settings.database_url), media_id)
    # Every acknowledged view is there, and none twice (at most the ones in flight at the kill were counted too).
    record_property("suite: views acknowledged before a kill -9", acknowledged)
    assert acknowledged <= stored <= attempted
    assert all(failure["extensions"]["code"] != "INTERNAL_SERVER_ERROR" for failure in load.failures)


@pytest.fixture
def durable_redis(tmp_path) -> Iterator[DurableRedis]:
    redis = DurableRedis(tmp_path / "redis")
    redis.start()
    try:
        yield redis
    finally:
        redis.kill()


async def test_redis_killed_and_restarted_under_load_loses_no_acknowledged_view(
    live_servers, settings, durable_redis, record_property
):
    base = live_servers.start(
        MEDIAGRAPH_REDIS_URL=durable_redis.url,
        MEDIAGRAPH_REDIS_PREFIX=private_prefix(settings, "faults"),
        MEDIAGRAPH_VIEW_FLUSH_LEASE_SECONDS="3",
    )
    _, media_id = await _media(base)
    subscriber = await WebSocketClient.connect(base.replace("http://", "ws://") + "/graphql")
    load = ViewLoad(base, media_id)
    running: asyncio.Task[None] | None = None
    try:
        assert (await subscriber.receive())["type"] == "connection_ack"
        operation = await subscriber.subscribe(VIEW_COUNT_LIVE, {"id": media_id})
        assert (await subscriber.receive())["id"] == operation
        running = asyncio.create_task(load.run())
        await load.until(100)
        durable_redis.kill()
        await asyncio.sleep(1)
        outage_failures = len(load.failures)
        durable_redis.start()
        # Back: from now on no request may fail. (Starting blocks this loop, so responses to
        # requests sent during the outage may only be read now: what counts is when each was sent.)
        back_since = time.monotonic()
        back_at = load.acknowledged
        await load.until(back_at + 150)
        assert load.failures_sent_since(back_since) == []
        # During the outage failures were coded, never internal errors.
        assert outage_failures > 0
        assert {failure["extensions"]["code"] for failure in load.failures} == {"SERVICE_UNAVAILABLE"}
        load.stop.set()
        await running
        running = None
        # The subscription made before the outage goes on, on the same socket.
        final = await _settled(base, _plain_url(settings.database_url), media_id)
        pushed = await _push_reaching(subscriber, base, media_id, final)
        assert pushed > final
        # Every acknowledged view is counted (the append-only file had them), none twice.
        record_property("suite: views acknowledged around a Redis kill", load.acknowledged)
        record_property("suite: requests refused while Redis was down", outage_failures)
        assert load.acknowledged <= final <= load.attempted
    finally:
        load.stop.set()
        if running is not None:
            await running
        await subscriber.close()


async def _push_reaching(subscriber: WebSocketClient, base: str, media_id: str, above: int) -> int:
    """Views recorded until the live subscription pushes a count above `above` (its pub/sub
    connection reconnects in the background); that count."""
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        for _ in range(60):
            await http.post(
                "/graphql",
                json={"query": RECORD_VIEW, "variables": {"id": media_id}},
                headers={"user-agent": f"late-{uuid.uuid4().hex}"},
            )
            try:
                while True:
                    message = await subscriber.receive(timeout=0.5)
                    count = message["payload"]["data"]["viewCount"]["viewCount"]
                    if count > above:
                        return int(count)
            except TimeoutError:
                continue
    raise AssertionError("no push reached the subscription after Redis came back")


@pytest.fixture
async def databases(second_postgres, settings) -> AsyncIterator[dict[str, Endpoints]]:
    """Two layouts provisioned from nothing: everything on the second PostgreSQL server (`main`),
    and the main database with shard 0 on the suite's server but shard 1 on the second one (`shard`)."""
    name = f"mgfault_{uuid.uuid4().hex[:8]}"
    private = async_url(second_postgres.url).rsplit("/", 1)[0]
    suite = async_url(settings.database_url).rsplit("/", 1)[0]
    layouts = {
        "main": Endpoints(
            f"{private}/{name}_main", (f"{private}/{name}_s0", f"{private}/{name}_s1"), settings.redis_url
        ),
        "shard": Endpoints(f"{suite}/{name}_main", (f"{suite}/{name}_s0", f"{private}/{name}_s1b"), settings.redis_url),
    }
    for endpoints in layouts.values():
        await provision(endpoints, logical_shards=8)
    try:
        yield layouts
    finally:
        if not second_postgres.listening():
            second_postgres.start()
        for endpoints in layouts.values():
            for url in (endpoints.database_url, *endpoints.shard_urls):
                await drop_database(url)


def _serve_on(live_servers, settings: Settings, endpoints: Endpoints, *args: str) -> str:
    return live_servers.start(
        "--no-workers",
        *args,
        MEDIAGRAPH_DATABASE_URL=endpoints.database_url,
        MEDIAGRAPH_SHARD_URLS=",".join(endpoints.shard_urls),
        MEDIAGRAPH_REDIS_PREFIX=private_prefix(settings, "pg"),
        MEDIAGRAPH_LOGICAL_SHARDS="8",
        # Every read reaches PostgreSQL: none is served from memory while it is down.
        MEDIAGRAPH_HOT_READ_SECONDS="0",
    )


async def test_the_main_database_restarting_is_service_unavailable_then_recovers_without_a_restart(
    live_servers, settings, second_postgres, databases
):
    base = _serve_on(live_servers, settings, databases["main"])
    _, media_id = await _media(base)
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        gql = GraphQLClient(http)
        assert (await gql.ok(VIEW_COUNT, {"id": media_id}))["media"] == {"viewCount": 0}
        second_postgres.stop("immediate")
        # Unreachable: a coded answer, not an internal error; reads and writes alike.
        for query, variables in [
            (VIEW_COUNT, {"id": media_id}),
            ("{ mediaList(first: 5) { edges { node { id } } } }", None),
            (RECORD_VIEW, {"id": media_id}),
        ]:
            result = await gql(query, variables)
            assert {error["extensions"]["code"] for error in result["errors"]} == {"SERVICE_UNAVAILABLE"}, result
        second_postgres.start()
        # The same process answers again once PostgreSQL is back (pools reconnect on their own).
        deadline = time.monotonic() + 60
        while (await gql(VIEW_COUNT, {"id": media_id})).get("errors"):
            assert time.monotonic() < deadline, "the server never recovered"
            await asyncio.sleep(0.25)
        for _ in range(20):
            await gql.ok(VIEW_COUNT, {"id": media_id})
            assert (await gql.ok(RECORD_VIEW, {"id": media_id}))["recordView"] is not None


async def test_one_comment_shard_down_fails_only_the_comment_fields_it_holds(
    live_servers, settings, second_postgres, databases
):
    layout = databases["shard"]
    base = _serve_on(live_servers, settings, layout)
    tag = f"fault{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        gql = GraphQLClient(http)
        token, _ = await create_user(gql)
        # Uploaded one after another, media take consecutive ids, so they spread over the shards.
        media_ids = []
        for n in range(8):
            response = await upload(http, token=token, title=f"Media {n}", tags=[tag])
            media_ids.append(response.json()["data"]["uploadMedia"]["id"])
        for n, media_id in enumerate(media_ids):
            await gql.ok(ADD_COMMENT, {"mediaId": media_id, "content": f"comment {n}"}, token=token)
        connection = await asyncpg.connect(_plain_url(layout.shard_urls[1]))
        try:
            on_private = {row[0] for row in await connection.fetch("SELECT DISTINCT media_id FROM comments")}
        finally:
            await connection.close()
        assert 0 < len(on_private) < len(media_ids), "the media should spread over both shards"
        second_postgres.stop("immediate")
        try:
            result = await gql(PAGE, {"tags": [tag]})
        finally:
            second_postgres.start()
    nodes = [edge["node"] for edge in result["data"]["mediaList"]["edges"]]
    assert sorted(node["id"] for node in nodes) == sorted(media_ids)
    failed_paths = set()
    for error in result["errors"]:
        assert error["extensions"]["code"] == "SERVICE_UNAVAILABLE", error
        assert error["path"][-1] in ("comments", "commentCount"), error
        failed_paths.add(error["path"][2])
    for index, node in enumerate(nodes):
        # Everything but the comments of media on the stopped shard answers.
        assert node["title"]
        assert node["viewCount"] == 0
        if raw_media_id(node["id"]) in on_private:
            assert index in failed_paths
            assert node["comments"] is None
        else:
            assert index not in failed_paths
            assert node["commentCount"] == 1
            assert len(node["comments"]["edges"]) == 1
