"""Comments across physical shards: batching, scatter-gather, a shard that is down, stale routing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event
from starlette.applications import Starlette

from mediagraph.app import create_app
from tests.support.comments import physical_of, raw_media_id
from tests.support.factories import ADD_COMMENT, add_comment, create_media, create_user, unique_name
from tests.support.graphql import GraphQLClient
from tests.support.servers import free_port

PAGE_OF_MEDIA = """
query($tags: [String!]) {
  mediaList(tags: $tags, first: 50) {
    edges { node { id title commentCount comments(first: 3) { edges { node { content } } pageInfo { hasNextPage } } } }
  }
}
"""
USER_COMMENTS = """
query($u: String!, $first: Int, $after: String) {
  user(username: $u) {
    comments(first: $first, after: $after) {
      edges { node { id content media { id } } }
      pageInfo { hasNextPage endCursor }
    }
  }
}
"""


@pytest.fixture(scope="module")
async def spread_media(http, gql):
    """Media with comments on both physical shards, tagged so one query lists exactly them."""
    token, user = await create_user(gql, nickname="Spreader")
    tag = unique_name("spread")
    media = [await create_media(http, token=token, title=f"m{n}", tags=[tag]) for n in range(50)]
    for n, item in enumerate(media):
        for k in range(n % 5):
            await add_comment(gql, token=token, media_id=item["id"], content=f"m{n} c{k}")
    return {"token": token, "user": user, "tag": tag, "media": media}


@pytest.fixture
def shard_statements(services) -> Iterator[list[tuple[str, Any]]]:
    """Statements (with parameters) sent to the shard databases while the test runs."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        seen.append((statement, parameters))

    for engine in services.databases.shards:
        event.listen(engine.sync_engine, "before_cursor_execute", record)
    yield seen
    for engine in services.databases.shards:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


async def test_a_page_of_fifty_media_reads_counts_and_first_comments_in_one_query_per_shard(
    gql, services, spread_media, count_queries
):
    shards_used = {physical_of(services, raw_media_id(item["id"])) for item in spread_media["media"]}
    assert shards_used == {0, 1}
    count_queries.clear()
    data = await gql.ok(PAGE_OF_MEDIA, {"tags": [spread_media["tag"]]})
    # The routing watcher's background reload of the shard map is not part of the request.
    statements = [statement for statement in count_queries if "FROM shard_map" not in statement]
    comment_reads = [statement for statement in statements if "comments" in statement]
    assert len(comment_reads) == 2, comment_reads
    assert len(statements) == 3  # the media page itself, then one per physical shard
    by_title = {edge["node"]["title"]: edge["node"] for edge in data["mediaList"]["edges"]}
    for n in range(50):
        node = by_title[f"m{n}"]
        assert node["commentCount"] == n % 5
        assert [edge["node"]["content"] for edge in node["comments"]["edges"]] == [
            f"m{n} c{k}" for k in range(min(n % 5, 3))
        ]
        assert node["comments"]["pageInfo"]["hasNextPage"] is (n % 5 > 3)


async def test_user_comments_merge_every_shard_newest_first_a_page_at_a_time(gql, spread_media, shard_statements):
    username = spread_media["user"]["username"]
    seen, after, pages = [], None, 0
    while True:
        shard_statements.clear()
        page = (await gql.ok(USER_COMMENTS, {"u": username, "first": 7, "after": after}))["user"]["comments"]
        reads = [(s, p) for s, p in shard_statements if "FROM comments" in s]
        assert len(reads) == 2  # one per physical shard, concurrently
        assert all(8 in tuple(parameters) for _, parameters in reads)  # never more than a page (+1) each
        seen += [edge["node"]["content"] for edge in page["edges"]]
        pages += 1
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    expected = [f"m{n} c{k}" for n in range(50) for k in range(n % 5)]
    assert seen == list(reversed(expected))
    assert pages == -(-len(expected) // 7)


async def test_user_comments_cursor_belongs_to_its_user(gql, spread_media):
    username = spread_media["user"]["username"]
    cursor = (await gql.ok(USER_COMMENTS, {"u": username, "first": 1}))["user"]["comments"]["pageInfo"]["endCursor"]
    _, other = await create_user(gql)
    result = await gql(USER_COMMENTS, {"u": other["username"], "first": 1, "after": cursor})
    assert result["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


async def test_a_writer_with_stale_routing_finds_the_new_home(gql, services, spread_media):
    item = spread_media["media"][0]
    media_id = raw_media_id(item["id"])
    router = services.databases.router
    logical = router.logical_shard(media_id)
    home = router.physical_of_logical(logical)
    router.assign(logical, 1 - home)  # as if this process missed a move
    try:
        comment = await add_comment(gql, token=spread_media["token"], media_id=item["id"], content="rerouted")
    finally:
        await services.databases.reload_router()
    assert router.physical_of_logical(logical) == home
    assert comment["content"] == "rerouted"
    listed = await gql.ok(
        "query($id: ID!) { media(id: $id) { comments(first: 10) { edges { node { id } } } } }", {"id": item["id"]}
    )
    assert comment["id"] in [edge["node"]["id"] for edge in listed["media"]["comments"]["edges"]]



async def test_reloading_the_shard_map_keeps_the_connection_pools(gql, services, spread_media):
    def connections(pool: str) -> int:
        (usage,) = [usage for usage in services.databases.pool_usage() if usage.pool == pool]
        return usage.in_use + usage.idle

    await gql.ok("query($id: ID!) { media(id: $id) { title } }", {"id": spread_media["media"][0]["id"]})
    held = connections("reads")
    assert held >= 1
    for _ in range(3):  # what the routing watcher does every `routing_refresh_seconds`
        await services.databases.reload_router()
    # The same pool, its connections kept (a pool replaced on each reload left the old one's open).
    assert connections("reads") == held
    await gql.ok("query($id: ID!) { media(id: $id) { title } }", {"id": spread_media["media"][1]["id"]})
    assert connections("reads") == held

@pytest.fixture
async def shard_one_down(settings) -> Iterator[GraphQLClient]:
    """An app whose physical shard 1 points at a closed port; shard 0 and the main database are real."""
    import httpx

    closed = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/gone"
    broken = settings.model_copy(update={"shard_urls": [settings.shard_urls[0], closed]})
    application: Starlette = create_app(broken)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://down.test") as client:
            yield GraphQLClient(client)


async def test_a_shard_that_is_down_fails_only_the_fields_that_need_it(spread_media, services, shard_one_down):
    result = await shard_one_down(PAGE_OF_MEDIA, {"tags": [spread_media["tag"]]})
    edges = result["data"]["mediaList"]["edges"]
    assert len(edges) == 50
    down = {item["id"] for item in spread_media["media"] if physical_of(services, raw_media_id(item["id"])) == 1}
    failed_paths = {tuple(error["path"]) for error in result["errors"]}
    assert {error["extensions"]["code"] for error in result["errors"]} == {"SERVICE_UNAVAILABLE"}
    for index, edge in enumerate(edges):
        node = edge["node"]
        if node is None:
            raise AssertionError(f"media {index} lost entirely")
        assert node["title"].startswith("m")
        if node["id"] in down:
            assert node["commentCount"] is None
            assert node["comments"] is None
            assert ("mediaList", "edges", index, "node", "commentCount") in failed_paths
        else:
            assert isinstance(node["commentCount"], int)


async def test_writes_and_scatter_reads_needing_a_down_shard_are_service_unavailable(
    spread_media, services, shard_one_down
):
    on_down = next(item for item in spread_media["media"] if physical_of(services, raw_media_id(item["id"])) == 1)
    token = spread_media["token"]
    result = await shard_one_down(ADD_COMMENT, {"mediaId": on_down["id"], "content": "lost?"}, token=token)
    assert result["errors"][0]["extensions"]["code"] == "SERVICE_UNAVAILABLE"
    username = spread_media["user"]["username"]
    query = "query($u: String!) { user(username: $u) { username comments(first: 5) { edges { node { id } } } } }"
    result = await shard_one_down(query, {"u": username})
    assert [error["extensions"]["code"] for error in result["errors"]] == ["SERVICE_UNAVAILABLE"]
    assert result["errors"][0]["path"] == ["user", "comments"]
    assert result["data"] == {"user": {"username": username, "comments": None}}
