from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import text

from mediagraph.dataloaders.views import live_view_totals
from mediagraph.db.views import likes
from mediagraph.events import EngagementEvent, EngagementKind
from mediagraph.ids import from_global_id
from mediagraph.keys.events import engagement_stream
from mediagraph.resolvers.views import like_batches
from mediagraph.workers import views as worker
from tests.support.apps import app_with
from tests.support.factories import create_media, create_user, record_views, unique_name
from tests.support.servers import free_port

RECORD_VIEW = "mutation($id: ID!) { recordView(mediaId: $id) { counted media { id viewCount } } }"
COUNTS = "query($id: ID!) { media(id: $id) { viewCount likeCount viewerHasLiked } }"
LIKE = "mutation($id: ID!) { likeMedia(mediaId: $id) { likeCount viewerHasLiked } }"
UNLIKE = "mutation($id: ID!) { unlikeMedia(mediaId: $id) { likeCount viewerHasLiked } }"
UNKNOWN_MEDIA = "TWVkaWE6OTk5OTk5OTk5"  # Media:999999999


async def _view(http, media_id, *, agent="agent", token=None):
    headers = {"user-agent": agent}
    if token:
        headers["authorization"] = f"Bearer {token}"
    response = await http.post("/graphql", json={"query": RECORD_VIEW, "variables": {"id": media_id}}, headers=headers)
    return response.json()["data"]["recordView"]


async def _durable(services, media_id):
    async with services.databases.main_session() as session:
        row = await session.execute(
            text(
                "SELECT m.view_count, c.view_count FROM media m "
                "LEFT JOIN media_view_count c ON c.media_id = m.id WHERE m.id = :id"
            ),
            {"id": from_global_id(media_id)[1]},
        )
        return tuple(row.one())


async def test_a_view_counts_once_per_viewer_per_window(http, gql):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    agent = unique_name("browser")
    assert (await _view(http, media["id"], agent=agent))["counted"] is True
    assert (await _view(http, media["id"], agent=agent))["counted"] is False
    # Another agent from the same address is another anonymous viewer.
    assert (await _view(http, media["id"], agent=agent + "-other"))["counted"] is True
    # A logged-in user is counted as the user, whatever the agent.
    assert (await _view(http, media["id"], agent=agent, token=token))["counted"] is True
    last = await _view(http, media["id"], agent="anything else", token=token)
    assert last == {"counted": False, "media": {"id": media["id"], "viewCount": 3}}


async def test_view_dedupe_keys_expire_after_the_window(http, gql, services, settings):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    await _view(http, media["id"], agent="expiring")
    # This media's keys only: other tests' keys may expire between the scan and the TTL read.
    _, media_id = from_global_id(media["id"])
    pattern = f"{settings.redis_prefix}views:*:seen:{media_id}:*"
    keys = [key async for key in services.redis.scan_iter(match=pattern)]
    ttls = [await services.redis.ttl(key) for key in keys]
    assert ttls
    assert all(0 < ttl <= settings.view_dedupe_seconds for ttl in ttls)


async def test_view_count_is_live_before_and_after_flush_and_sync(http, gql, services):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    assert await record_views(http, media_id=media["id"], count=25) == 25
    assert (await gql.ok(COUNTS, {"id": media["id"]}))["media"]["viewCount"] == 25
    assert await _durable(services, media["id"]) == (0, None)

    await worker.flush(services)
    assert await _durable(services, media["id"]) == (0, 25)
    assert (await gql.ok(COUNTS, {"id": media["id"]}))["media"]["viewCount"] == 25

    await worker.sync(services)
    assert await _durable(services, media["id"]) == (25, 25)
    await record_views(http, media_id=media["id"], count=5)
    assert (await gql.ok(COUNTS, {"id": media["id"]}))["media"]["viewCount"] == 30


async def test_views_of_missing_media_are_refused(http, gql):
    assert await gql.error_code(RECORD_VIEW, {"id": UNKNOWN_MEDIA}) == "NOT_FOUND"
    assert await gql.error_code(RECORD_VIEW, {"id": "not-an-id"}) == "BAD_USER_INPUT"
    _, user = await create_user(gql)
    assert await gql.error_code(RECORD_VIEW, {"id": user["id"]}) == "BAD_USER_INPUT"


async def test_views_of_media_deleted_before_the_flush_are_dropped(http, gql, services):
    token, _ = await create_user(gql)
    doomed = await create_media(http, token=token)
    kept = await create_media(http, token=token)
    await record_views(http, media_id=doomed["id"], count=3)
    await record_views(http, media_id=kept["id"], count=2)
    await gql.ok("mutation($id: ID!) { deleteMedia(id: $id) { id } }", {"id": doomed["id"]}, token=token)
    await worker.flush(services)
    assert await _durable(services, kept["id"]) == (0, 2)


async def test_flushed_views_reach_the_engagement_stream(http, gql, services):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    raw_id = from_global_id(media["id"])[1]
    await record_views(http, media_id=media["id"], count=4)
    await worker.flush(services)
    entries = await services.redis.xrevrange(engagement_stream(services.keys), count=2000)
    events = [EngagementEvent.from_fields(fields) for _, fields in entries]
    assert EngagementEvent(EngagementKind.VIEW, raw_id, 4) in events


async def test_like_is_one_per_user_and_counts_exactly(http, gql, services):
    owner, _ = await create_user(gql)
    fan, _ = await create_user(gql)
    other, _ = await create_user(gql)
    media = await create_media(http, token=owner)
    variables = {"id": media["id"]}
    assert (await gql.ok(LIKE, variables, token=fan))["likeMedia"] == {"likeCount": 1, "viewerHasLiked": True}
    assert (await gql.ok(LIKE, variables, token=fan))["likeMedia"] == {"likeCount": 1, "viewerHasLiked": True}
    assert (await gql.ok(LIKE, variables, token=other))["likeMedia"]["likeCount"] == 2
    assert (await gql.ok(UNLIKE, variables, token=fan))["unlikeMedia"] == {"likeCount": 1, "viewerHasLiked": False}
    assert (await gql.ok(UNLIKE, variables, token=fan))["unlikeMedia"] == {"likeCount": 1, "viewerHasLiked": False}
    assert (await gql.ok(COUNTS, variables, token=other))["media"] == {
        "viewCount": 0,
        "likeCount": 1,
        "viewerHasLiked": True,
    }
    assert (await gql.ok(COUNTS, variables))["media"]["viewerHasLiked"] is False

    entries = await services.redis.xrevrange(engagement_stream(services.keys), count=2000)
    raw_id = from_global_id(media["id"])[1]
    deltas = [
        event.delta
        for event in (EngagementEvent.from_fields(fields) for _, fields in reversed(entries))
        if event.media_id == raw_id
    ]
    assert deltas == [1, 1, -1]


async def test_likes_need_a_user_and_an_existing_media(http, gql):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    assert await gql.error_code(LIKE, {"id": media["id"]}) == "UNAUTHENTICATED"
    assert await gql.error_code(UNLIKE, {"id": media["id"]}) == "UNAUTHENTICATED"
    assert await gql.error_code(LIKE, {"id": UNKNOWN_MEDIA}, token=token) == "NOT_FOUND"
    assert await gql.error_code(LIKE, {"id": "garbage"}, token=token) == "BAD_USER_INPUT"


async def test_a_like_is_one_statement_and_a_revoked_token_likes_nothing(http, gql, services, count_queries):
    owner, _ = await create_user(gql)
    fan, fan_user = await create_user(gql)
    media = await create_media(http, token=owner)
    variables = {"id": media["id"]}
    count_queries.clear()
    await gql.ok(LIKE, variables, token=fan)
    # The like, its count and the sync's queue in one statement; no transaction around it.
    writes = [statement for statement in count_queries if not statement.lstrip().upper().startswith("SELECT")]
    assert len(writes) == 1, count_queries
    assert not [statement for statement in count_queries if statement.strip().upper() in {"BEGIN", "COMMIT"}]
    async with services.databases.main_session() as session:
        await session.execute(
            text("UPDATE users SET token_version = token_version + 1 WHERE id = :id"),
            {"id": from_global_id(fan_user["id"])[1]},
        )
        await session.commit()
    assert await gql.error_code(UNLIKE, variables, token=fan) == "UNAUTHENTICATED"
    assert (await gql.ok(COUNTS, variables, token=owner))["media"]["likeCount"] == 1


async def test_concurrent_likes_and_repeats_keep_the_count_exact(http, gql, services):
    owner, _ = await create_user(gql)
    media = await create_media(http, token=owner)
    fans = [(await create_user(gql))[0] for _ in range(12)]
    variables = {"id": media["id"]}
    await asyncio.gather(*(gql.ok(LIKE, variables, token=fan) for fan in fans for _ in range(3)))
    await asyncio.gather(
        *(gql.ok(UNLIKE, variables, token=fan) for fan in fans[:5]),
        *(gql.ok(LIKE, variables, token=fan) for fan in fans[5:]),
    )
    assert (await gql.ok(COUNTS, variables))["media"]["likeCount"] == 7
    async with services.databases.main_session() as session:
        rows, count = (
            await session.execute(
                text(
                    "SELECT (SELECT count(*) FROM media_likes WHERE media_id = :id), "
                    "(SELECT like_count FROM media_like_count WHERE media_id = :id)"
                ),
                {"id": from_global_id(media["id"])[1]},
            )
        ).one()
    assert rows == count == 7


async def test_page_of_media_with_counts_runs_constant_queries(http, gql, count_queries):
    token, _ = await create_user(gql)
    tag = unique_name("counts")
    media = [await create_media(http, token=token, tags=[tag]) for _ in range(12)]
    for item in media[:4]:
        await gql.ok(LIKE, {"id": item["id"]}, token=token)
        await record_views(http, media_id=item["id"], count=2)
    query = """
    query($t: [String!]) { mediaList(tags: $t, sort: VIEWS, first: 20) {
      edges { node { id viewCount likeCount viewerHasLiked viewerHasBookmarked } } } }
    """
    count_queries.clear()
    data = await gql.ok(query, {"t": [tag]}, token=token)
    assert len(data["mediaList"]["edges"]) == 12
    # The page, view counts, like counts, the viewer's likes, the viewer's bookmarks.
    assert len(count_queries) <= 5, count_queries
    assert sorted(edge["node"]["viewCount"] for edge in data["mediaList"]["edges"])[-4:] == [2, 2, 2, 2]


async def test_view_counts_fall_back_to_the_database_when_redis_is_down(http, gql, services):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    await record_views(http, media_id=media["id"], count=3)
    await worker.flush(services)
    await record_views(http, media_id=media["id"], count=2)
    raw_id = from_global_id(media["id"])[1]
    unreachable = Redis(port=free_port(), socket_connect_timeout=1)
    try:
        without_redis = dataclasses.replace(services, redis=unreachable)
        assert await live_view_totals(without_redis, [raw_id]) == {raw_id: 3}
    finally:
        await unreachable.aclose()
    assert await live_view_totals(services, [raw_id]) == {raw_id: 5}


async def test_a_burst_beyond_the_redis_pool_waits_for_connections_instead_of_failing(http, gql, settings):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    async with app_with(settings, redis_max_connections=2) as (_, small_pool):
        counted = await record_views(small_pool.http, media_id=media["id"], count=400, concurrency=400)
    assert counted == 400


async def test_likes_and_unlikes_of_one_moment_each_answer_for_their_own_row(http, gql, services):
    owner, _ = await create_user(gql)
    media = await create_media(http, token=owner)
    raw_media = from_global_id(media["id"])[1]
    accounts = [await create_user(gql) for _ in range(4)]
    liker, unliker, never_liked, twice = (from_global_id(user["id"])[1] for _, user in accounts)
    await gql.ok(LIKE, {"id": media["id"]}, token=accounts[1][0])
    batches = like_batches(services.databases.main_writes)

    def ask(user_id: int, *, like: bool, token_version: int = 0) -> Any:
        return batches.change(services, likes.LikeRequest(raw_media, user_id, token_version), like=like)

    # One moment: the likes and unlikes share a statement, but for `twice`'s repeat, which
    # must come after its first like.
    answers = await asyncio.gather(
        ask(liker, like=True),
        ask(unliker, like=False),
        ask(never_liked, like=False),
        ask(twice, like=True),
        ask(twice, like=True),
        ask(never_liked, like=True, token_version=7),
        return_exceptions=True,
    )
    assert [answer.changed for answer in answers[:5]] == [True, True, False, True, False]
    assert isinstance(answers[5], likes.StaleToken)
    assert {answer.media["id"] for answer in answers[:5]} == {raw_media}
    assert (await gql.ok(COUNTS, {"id": media["id"]}))["media"]["likeCount"] == 2
    async with services.databases.main_session() as session:
        found = await session.execute(text("SELECT user_id FROM media_likes WHERE media_id = :id"), {"id": raw_media})
        liked = set(found.scalars())
    assert liked == {liker, twice}


async def test_a_like_and_its_taking_back_in_one_moment_are_written_in_the_order_asked(http, gql, services):
    owner, _ = await create_user(gql)
    media = await create_media(http, token=owner)
    raw_media = from_global_id(media["id"])[1]
    _, fan = await create_user(gql)
    fan_id = from_global_id(fan["id"])[1]
    batches = like_batches(services.databases.main_writes)

    def ask(*, like: bool) -> Any:
        return batches.change(services, likes.LikeRequest(raw_media, fan_id, 0), like=like)

    answers = await asyncio.gather(ask(like=True), ask(like=False), ask(like=False), ask(like=True))
    assert [answer.changed for answer in answers] == [True, True, False, True]
    assert (await gql.ok(COUNTS, {"id": media["id"]}))["media"]["likeCount"] == 1
    answers = await asyncio.gather(ask(like=False), ask(like=True), ask(like=False))
    assert [answer.changed for answer in answers] == [True, True, True]
    assert (await gql.ok(COUNTS, {"id": media["id"]}))["media"]["likeCount"] == 0
