"""Comment shards on two PostgreSQL servers: physical shard 1 lives on a second server the run starts.

The main database and physical shard 0 are on the run's server, physical shard 1 on
`second_postgres` (tests/conftest.py). The thread, scatter-gather, nickname and move
scenarios of the one-server modules run here again against that layout (pytest collects
the imported tests in this module, where `app`, `services`, `http`, `gql` and
`live_servers` are the two-server ones), and the tests below add what only two servers
show: moves from one server to the other under traffic, the nickname worker as a process,
and one server going down and coming back while the app keeps running.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from sqlalchemy.engine import make_url
from starlette.applications import Starlette

from mediagraph.app import create_app
from mediagraph.db.endpoints import async_url
from mediagraph.db.provision import drop_database
from mediagraph.db.shards.moves import move_logical_shard
from mediagraph.db.shards.router import ShardRouter
from mediagraph.ids import decode_id
from mediagraph.services import Services
from mediagraph.settings import Settings
from mediagraph.workers.nicknames import maintain, replay_all
from mediagraph.workers.nicknames.replay import queue_heads, shard_offsets
from tests import test_comments as threads
from tests import test_comments_moves as moves
from tests import test_comments_nicknames as nicknames
from tests import test_comments_shards as scatter
from tests.support.apps import private_prefix
from tests.support.comments import physical_of, raw_media_id, seed_root_comments, shard_execute
from tests.support.databases import databases_on_two_servers
from tests.support.factories import ADD_COMMENT, add_comment, create_media, create_user
from tests.support.graphql import GraphQLClient
from tests.support.postgres import PostgresServer
from tests.support.servers import LiveServers
from tests.test_comments_moves import READ, Traffic, hosts, rows_of_logical, whole_thread
from tests.test_comments_nicknames import CHANGE_NICKNAME
from tests.test_comments_shards import PAGE_OF_MEDIA

SECOND_SERVER = 1  # the physical shard on `second_postgres`
USER_COMMENTS = "query($u: String!) { user(username: $u) { username comments(first: 5) { edges { node { id } } } } }"
WRITER_THREAD = "query($id: ID!) { media(id: $id) { comments(first: 50) { edges { node { writerNickname } } } } }"


@pytest.fixture(scope="module")
def two_servers(settings: Settings, second_postgres: PostgresServer) -> Iterator[Settings]:
    with databases_on_two_servers(settings, second_postgres.url, "servers") as endpoints:
        yield settings.model_copy(
            update={
                "database_url": endpoints.database_url,
                "shard_urls": list(endpoints.shard_urls),
                "redis_prefix": private_prefix(settings, "servers"),
            }
        )


@pytest.fixture(scope="module")
async def app(two_servers: Settings) -> AsyncIterator[Starlette]:
    application = create_app(two_servers)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture(scope="module")
def services(app: Starlette) -> Services:
    return app.state.services  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app, client=("203.0.113.8", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://mediagraph.test") as client:
        yield client


@pytest.fixture(scope="module")
def gql(http: httpx.AsyncClient) -> GraphQLClient:
    return GraphQLClient(http)


@pytest.fixture(scope="module")
def live_servers(two_servers: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServers]:
    servers = LiveServers(two_servers, Path(tmp_path_factory.mktemp("live-servers")))
    try:
        yield servers
    finally:
        servers.stop_all()


async def media_on(http, services, token: str, physical: int) -> dict:
    while True:
        media = await create_media(http, token=token)
        if physical_of(services, raw_media_id(media["id"])) == physical:
            return media


@pytest.fixture
async def media(http, services, author):
    """The threads of the imported tests live on the second server."""
    token, _ = author
    return await media_on(http, services, token, SECOND_SERVER)


def test_the_layout_really_spans_two_servers(two_servers, second_postgres):
    first, second = (url.split("@", 1)[1].split("/", 1)[0] for url in two_servers.shard_urls)
    assert first != second
    assert second == f"127.0.0.1:{second_postgres.port}"
    assert two_servers.database_url.split("@", 1)[1].split("/", 1)[0] == first


async def test_migrate_creates_each_shard_database_on_its_own_server(settings, second_postgres, live_servers):
    name = f"mgmigrate_{uuid.uuid4().hex[:6]}"
    here = make_url(settings.database_url)
    there = make_url(async_url(second_postgres.url))
    urls = [
        here.set(database=f"{name}_main").render_as_string(hide_password=False),
        here.set(database=f"{name}_shard_0").render_as_string(hide_password=False),
        there.set(database=f"{name}_shard_1").render_as_string(hide_password=False),
    ]
    try:
        migrated = await asyncio.to_thread(
            live_servers.run,
            "migrate",
            MEDIAGRAPH_DATABASE_URL=urls[0],
            MEDIAGRAPH_SHARD_URLS=",".join(urls[1:]),
            MEDIAGRAPH_LOGICAL_SHARDS="8",
        )
        assert migrated.returncode == 0, migrated.stderr
        hosted = []
        for url in urls[1:]:
            connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
            try:
                rows = await connection.fetch("SELECT logical_shard FROM hosted_logical_shards ORDER BY 1")
            finally:
                await connection.close()
            hosted.append([row[0] for row in rows])
        assert hosted == [[0, 2, 4, 6], [1, 3, 5, 7]]
    finally:
        for url in urls:
            await drop_database(url)


async def test_a_process_missing_a_shard_url_says_so_when_the_map_names_that_shard(services, caplog):
    shorter = ShardRouter(services.settings.logical_shards, physical_shards=1)
    async with services.databases.main_session() as session:
        await shorter.reload(session)
    errors = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert any("beyond the 1 in this process's MEDIAGRAPH_SHARD_URLS" in message for message in errors), errors
    assert {shorter.physical_of_logical(n) for n in range(services.settings.logical_shards)} == {0}


# The one-server scenarios, collected again here on two servers, in an order where none
# disturbs what a later one counts (the spreader's comments are counted before any is added).
author = threads.author
spread_media = scatter.spread_media
shard_statements = scatter.shard_statements
test_replies_nest_under_their_parent_in_creation_order = threads.test_replies_nest_under_their_parent_in_creation_order
test_fifty_concurrent_replies_to_one_parent_all_succeed_with_ordered_paths = (
    threads.test_fifty_concurrent_replies_to_one_parent_all_succeed_with_ordered_paths
)
test_deleting_removes_leaves_and_marks_parents_until_their_last_reply_goes = (
    threads.test_deleting_removes_leaves_and_marks_parents_until_their_last_reply_goes
)
test_keyset_pages_walk_the_whole_thread_without_gaps_or_repeats = (
    threads.test_keyset_pages_walk_the_whole_thread_without_gaps_or_repeats
)
test_page_numbers_count_only_as_far_as_the_block_of_buttons = (
    threads.test_page_numbers_count_only_as_far_as_the_block_of_buttons
)
test_a_page_of_fifty_media_reads_counts_and_first_comments_in_one_query_per_shard = (
    scatter.test_a_page_of_fifty_media_reads_counts_and_first_comments_in_one_query_per_shard
)
test_user_comments_merge_every_shard_newest_first_a_page_at_a_time = (
    scatter.test_user_comments_merge_every_shard_newest_first_a_page_at_a_time
)
test_a_writer_with_stale_routing_finds_the_new_home = scatter.test_a_writer_with_stale_routing_finds_the_new_home
test_a_nickname_change_reaches_existing_comments_on_every_shard = (
    nicknames.test_a_nickname_change_reaches_existing_comments_on_every_shard
)
test_a_shard_too_far_behind_is_resynced_from_the_users_table = (
    nicknames.test_a_shard_too_far_behind_is_resynced_from_the_users_table
)
test_a_shard_whose_logs_were_pruned_is_resynced = nicknames.test_a_shard_whose_logs_were_pruned_is_resynced
test_a_path_freed_and_taken_again_between_copy_rounds_moves_cleanly = (
    moves.test_a_path_freed_and_taken_again_between_copy_rounds_moves_cleanly
)
test_a_move_discards_what_an_interrupted_move_left_on_the_target = (
    moves.test_a_move_discards_what_an_interrupted_move_left_on_the_target
)
test_every_process_follows_a_move_made_by_the_command = moves.test_every_process_follows_a_move_made_by_the_command


@pytest.mark.parametrize("towards", [SECOND_SERVER, 0], ids=["to-the-second-server", "back-to-the-first"])
async def test_a_move_between_servers_under_writes_and_reads_loses_and_duplicates_nothing(http, gql, services, towards):
    token, user = await create_user(gql, nickname="Traveller")
    media = await media_on(http, services, token, 1 - towards)
    media_id = raw_media_id(media["id"])
    logical = services.databases.router.logical_shard(media_id)
    await seed_root_comments(
        services, media_id=media_id, writer_id=decode_id(user["id"], "User"), nickname="Traveller", count=600
    )
    seeded = {node["id"] for node in await whole_thread(gql, media["id"])}

    traffic = Traffic(gql, token, media["id"])
    tasks = [asyncio.create_task(traffic.writer(f"w{n}")) for n in range(3)] + [asyncio.create_task(traffic.reader())]
    await traffic.until(3)
    writes_before = traffic.writes
    report = await move_logical_shard(services, logical=logical, target=towards, batch_size=100, grace_seconds=0.5)
    writes_at_switch = traffic.writes
    await traffic.until(writes_at_switch + 6)  # and more at the new home, on the other server
    traffic.stop.set()
    await asyncio.gather(*tasks)

    assert writes_at_switch > writes_before  # the move really ran under writes
    assert traffic.errors == []
    assert (report.source, report.target) == (1 - towards, towards)
    assert services.databases.router.physical_of_logical(logical) == towards
    assert await hosts(services, towards, logical)
    assert not await hosts(services, 1 - towards, logical)
    assert await rows_of_logical(services, 1 - towards, logical) == 0
    ids = [node["id"] for node in await whole_thread(gql, media["id"])]
    assert len(ids) == len(set(ids))
    assert set(ids) == seeded | traffic.live
    assert (await gql.ok(READ, {"id": media["id"]}))["media"]["commentCount"] == len(ids)


async def test_the_command_moves_a_shard_to_the_second_server_while_another_process_writes_and_reads(
    services, live_servers
):
    base = live_servers.start("--no-workers")
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        remote = GraphQLClient(client)
        token, user = await create_user(remote, nickname="Remote")
        media = await media_on(client, services, token, 0)
        media_id = raw_media_id(media["id"])
        logical = services.databases.router.logical_shard(media_id)
        await seed_root_comments(
            services, media_id=media_id, writer_id=decode_id(user["id"], "User"), nickname="Remote", count=300
        )
        seeded = {node["id"] for node in await whole_thread(remote, media["id"])}
        traffic = Traffic(remote, token, media["id"])
        tasks = [asyncio.create_task(traffic.writer(f"w{n}")) for n in range(2)]
        tasks.append(asyncio.create_task(traffic.reader()))
        await traffic.until(3)
        writes_before = traffic.writes
        moved = await asyncio.to_thread(
            live_servers.run,
            "shards",
            "move",
            str(logical),
            "--to",
            str(SECOND_SERVER),
            "--grace",
            "2",
            "--batch",
            "50",
        )
        writes_during = traffic.writes - writes_before
        # The serving process learns of the move from the command's notice, or from its fence.
        await traffic.until(traffic.writes + 6)
        traffic.stop.set()
        await asyncio.gather(*tasks)
        ids = [node["id"] for node in await whole_thread(remote, media["id"])]
    assert moved.returncode == 0, moved.stderr
    assert f"from physical shard 0 to {SECOND_SERVER}" in moved.stderr
    assert writes_during > 0  # the move really ran under writes
    assert traffic.errors == []
    assert len(ids) == len(set(ids))
    assert set(ids) == seeded | traffic.live
    assert await hosts(services, SECOND_SERVER, logical)
    assert await rows_of_logical(services, 0, logical) == 0


async def wait_for(check, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.2)


async def nicknames_on(gql, media: list[dict]) -> set[str]:
    names = set()
    for item in media:
        edges = (await gql.ok(WRITER_THREAD, {"id": item["id"]}))["media"]["comments"]["edges"]
        names |= {edge["node"]["writerNickname"] for edge in edges}
    return names


async def test_the_nickname_worker_replays_and_resyncs_both_servers(http, gql, services, live_servers):
    token, _ = await create_user(gql, nickname="Old name")
    owner, _ = await create_user(gql)
    media = [await media_on(http, services, owner, physical) for physical in (0, SECOND_SERVER)]
    for item in media:
        await add_comment(gql, token=token, media_id=item["id"])

    worker = live_servers.spawn("worker", "nicknames")
    try:
        await gql.ok(CHANGE_NICKNAME, {"n": "New name"}, token=token)

        async def replayed() -> bool:
            return await nicknames_on(gql, media) == {"New name"}

        await wait_for(replayed, "the worker never replayed the change onto both servers")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    heads = await queue_heads(services)
    for physical in (0, SECOND_SERVER):
        assert await shard_offsets(services, physical) == heads

    # A shard that drifted where no log can fix it: the worker, told to resync past any lag,
    # rewrites the second server's nicknames from the users table on the main server.
    quiet_token = (await create_user(gql, nickname="Changes once"))[0]
    await add_comment(gql, token=quiet_token, media_id=media[1]["id"])
    await shard_execute(
        services,
        SECOND_SERVER,
        "UPDATE comments SET writer_nickname = 'Drifted' WHERE media_id = :m",
        m=raw_media_id(media[1]["id"]),
    )
    await gql.ok(CHANGE_NICKNAME, {"n": "Changed once"}, token=quiet_token)
    worker = live_servers.spawn("worker", "nicknames", MEDIAGRAPH_NICKNAME_RESYNC_LAG="0")
    try:

        async def resynced() -> bool:
            return await nicknames_on(gql, media[1:]) == {"New name", "Changed once"}

        await wait_for(resynced, "the worker never resynced the second server")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    assert await shard_offsets(services, SECOND_SERVER) == await queue_heads(services)


async def test_the_second_server_down_fails_only_its_comments_and_the_app_recovers(
    http, gql, services, spread_media, second_postgres
):
    token, _ = await create_user(gql)
    on_second = {item["id"] for item in spread_media["media"] if physical_of(services, raw_media_id(item["id"])) == 1}
    assert 0 < len(on_second) < len(spread_media["media"])
    first_home = next(item["id"] for item in spread_media["media"] if item["id"] not in on_second)
    second_home = next(iter(on_second))
    username = spread_media["user"]["username"]
    renamed_token, _ = await create_user(gql, nickname="Before outage")
    for home in (first_home, second_home):
        await add_comment(gql, token=renamed_token, media_id=home, content="renamed later")

    second_postgres.stop("immediate")
    try:
        result = await gql(PAGE_OF_MEDIA, {"tags": [spread_media["tag"]]})
        assert {error["extensions"]["code"] for error in result["errors"]} == {"SERVICE_UNAVAILABLE"}
        failed = {tuple(error["path"]) for error in result["errors"]}
        edges = result["data"]["mediaList"]["edges"]
        assert len(edges) == len(spread_media["media"])
        for index, edge in enumerate(edges):
            node = edge["node"]
            assert node["title"].startswith("m")  # media themselves come from the main server
            if node["id"] in on_second:
                assert node["commentCount"] is None
                assert node["comments"] is None
                assert ("mediaList", "edges", index, "node", "commentCount") in failed
            else:
                assert isinstance(node["commentCount"], int)
                assert not any(path[2] == index for path in failed)
        # Writes to the first server's shard go on; the second's are refused with the code.
        await add_comment(gql, token=token, media_id=first_home, content="while down")
        refused = await gql(ADD_COMMENT, {"mediaId": second_home, "content": "lost?"}, token=token)
        assert refused["errors"][0]["extensions"]["code"] == "SERVICE_UNAVAILABLE"
        # A scatter read that needs both servers fails that field alone.
        scattered = await gql(USER_COMMENTS, {"u": username})
        assert [error["extensions"]["code"] for error in scattered["errors"]] == ["SERVICE_UNAVAILABLE"]
        assert scattered["data"] == {"user": {"username": username, "comments": None}}
        # The process stays ready (every process shares the server) and says which shard fails.
        ready = await http.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["checks"]["shards"][SECOND_SERVER]["ok"] is False
        assert any(warning.startswith("shard 1: ") for warning in ready.json()["warnings"])
        # A nickname change replays onto the shard that answers; the other's logs are kept.
        await gql.ok(CHANGE_NICKNAME, {"n": "During outage"}, token=renamed_token)
        await replay_all(services)
        await maintain(services)
        assert "During outage" in await nicknames_on(gql, [{"id": first_home}])
    finally:
        second_postgres.start()

    # The same app, not restarted, answers again once the server is back.
    async def recovered() -> bool:
        return not (await gql(PAGE_OF_MEDIA, {"tags": [spread_media["tag"]]})).get("errors")

    await wait_for(recovered, "the app never recovered after the second server came back")
    await add_comment(gql, token=token, media_id=second_home, content="after")
    assert "Before outage" in await nicknames_on(gql, [{"id": second_home}])
    await replay_all(services)
    assert "Before outage" not in await nicknames_on(gql, [{"id": first_home}, {"id": second_home}])
    assert "During outage" in await nicknames_on(gql, [{"id": second_home}])
    assert (await gql.ok(USER_COMMENTS, {"u": username}))["user"]["comments"]["edges"]
