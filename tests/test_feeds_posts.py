from __future__ import annotations

import pytest

from mediagraph.ids import decode_id, snowflake_time
from mediagraph.keys.feeds import Entry, author_feed, floor_marker
from tests.support.apps import app_with, private_prefix
from tests.support.factories import create_media, create_post, create_user
from tests.support.graphql import error_extensions

CREATE = "mutation($text: String!, $mediaId: ID) { createPost(text: $text, mediaId: $mediaId) { id text createdAt author { username } media { title } } }"
DELETE = "mutation($id: ID!) { deletePost(id: $id) { id } }"
NODE = "query($id: ID!) { node(id: $id) { __typename ... on Post { text author { username } } } }"
POST = "query($id: ID!) { post(id: $id) { id media { id } } }"
DELETE_MEDIA = "mutation($id: ID!) { deleteMedia(id: $id) { id } }"
USER_POSTS = """
query($u: String!, $first: Int, $after: String) {
  user(username: $u) { posts(first: $first, after: $after) { edges { cursor node { id text } } pageInfo { hasNextPage endCursor } } }
}
"""


@pytest.fixture(scope="module")
async def small(settings):
    """An app whose author feeds keep 4 posts, so paging crosses into PostgreSQL quickly."""
    async with app_with(settings, redis_prefix=private_prefix(settings, "posts"), author_feed_size=4) as app:
        yield app


async def _all_posts(gql, username, *, first):
    ids, after = [], None
    while True:
        page = (await gql.ok(USER_POSTS, {"u": username, "first": first, "after": after}))["user"]["posts"]
        ids += [edge["node"]["id"] for edge in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            return ids
        after = page["pageInfo"]["endCursor"]


async def _cached(services, author_global_id):
    key = author_feed(services.keys, decode_id(author_global_id, "User"))
    return [Entry.parse(member) for member in reversed(await services.redis.zrange(key, 0, -1))], key


@pytest.mark.parametrize(
    "text",
    [
        "😀" * 300,  # 300 characters, 1,200 bytes
        "e\u0301" * 300,  # 600 code points that NFC composes into 300 characters
        "👨\u200d👩\u200d👧 family",  # emoji joined by zero-width joiners
        "line one\nline two\ttabbed",
        "  padded  ",
    ],
)
async def test_post_text_up_to_300_characters_is_accepted(gql, text):
    token, user = await create_user(gql)
    post = (await gql.ok(CREATE, {"text": text}, token=token))["createPost"]
    assert len(post["text"]) <= 300
    assert post["author"] == {"username": user["username"]}
    assert post["text"] == post["text"].strip()


@pytest.mark.parametrize(
    "text",
    ["😀" * 301, "a" * 301, "", "   \n\t ", "bell\u0007", "null\u0000byte", "bidi\u202eoverride", "\u200d"],
)
async def test_bad_post_text_is_rejected(gql, text):
    token, _ = await create_user(gql)
    result = await gql(CREATE, {"text": text}, token=token)
    assert error_extensions(result) == {"code": "BAD_USER_INPUT", "argument": "text"}


async def test_posting_needs_a_login(gql):
    assert await gql.error_code(CREATE, {"text": "hi"}) == "UNAUTHENTICATED"


async def test_post_ids_are_snowflakes_and_posts_are_nodes(gql):
    token, user = await create_user(gql)
    first = (await gql.ok(CREATE, {"text": "first"}, token=token))["createPost"]
    second = (await gql.ok(CREATE, {"text": "second"}, token=token))["createPost"]
    first_raw, second_raw = decode_id(first["id"], "Post"), decode_id(second["id"], "Post")
    assert second_raw > first_raw
    assert snowflake_time(first_raw).isoformat()[:19] == first["createdAt"][:19]
    node = (await gql.ok(NODE, {"id": second["id"]}))["node"]
    assert node == {"__typename": "Post", "text": "second", "author": {"username": user["username"]}}


async def test_attached_media_must_exist_and_may_be_deleted_later(gql, http):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token, title="Sunset")
    post = (await gql.ok(CREATE, {"text": "look", "mediaId": media["id"]}, token=token))["createPost"]
    assert post["media"] == {"title": "Sunset"}
    missing = "TWVkaWE6OTk5OTk5OTk5OQ"  # Media:9999999999
    assert await gql.error_code(CREATE, {"text": "look", "mediaId": missing}, token=token) == "NOT_FOUND"
    await gql.ok(DELETE_MEDIA, {"id": media["id"]}, token=token)
    assert (await gql.ok(POST, {"id": post["id"]}))["post"] == {"id": post["id"], "media": None}


async def test_only_the_author_deletes_a_post(gql):
    token, _ = await create_user(gql)
    other_token, _ = await create_user(gql)
    post_id = await create_post(gql, token=token)
    assert await gql.error_code(DELETE, {"id": post_id}, token=other_token) == "FORBIDDEN"
    assert await gql.error_code(DELETE, {"id": post_id}) == "UNAUTHENTICATED"
    assert (await gql.ok(DELETE, {"id": post_id}, token=token))["deletePost"] == {"id": post_id}
    assert await gql.error_code(DELETE, {"id": post_id}, token=token) == "NOT_FOUND"
    assert (await gql.ok(POST, {"id": post_id}))["post"] is None


async def test_user_posts_scroll_from_the_author_feed_into_postgresql(small):
    services, gql = small
    token, user = await create_user(gql)
    created = [await create_post(gql, token=token, text=f"post {n}") for n in range(11)]
    newest_first = list(reversed(created))
    for first in (1, 3, 4, 5, 20):
        assert await _all_posts(gql, user["username"], first=first) == newest_first
    entries, key = await _cached(services, user["id"])
    # The first read built the author feed: the newest four, nothing older vouched for.
    assert [entry.post_id for entry in entries] == [decode_id(post, "Post") for post in newest_first[:4]]
    assert 6 * 86400 < await services.redis.ttl(key) <= 7 * 86400


async def test_new_posts_enter_an_existing_author_feed_and_renew_it(small):
    services, gql = small
    token, user = await create_user(gql)
    first = await create_post(gql, token=token)
    entries, key = await _cached(services, user["id"])
    assert entries == []  # writing never creates an author feed
    await _all_posts(gql, user["username"], first=5)
    entries, _ = await _cached(services, user["id"])
    # Complete: the author has nothing older, so the feed says so and PostgreSQL is not asked.
    assert [entry.member for entry in entries] == [
        Entry(decode_id(first, "Post"), decode_id(user["id"], "User")).member,
        floor_marker(0),
    ]
    await services.redis.expire(key, 60)
    second = await create_post(gql, token=token)
    entries, _ = await _cached(services, user["id"])
    assert entries[0].post_id == decode_id(second, "Post")
    assert await services.redis.ttl(key) > 6 * 86400


async def test_deleted_posts_leave_the_author_feed_and_the_pages(small):
    services, gql = small
    token, user = await create_user(gql)
    created = [await create_post(gql, token=token, text=f"post {n}") for n in range(6)]
    await _all_posts(gql, user["username"], first=2)
    await gql.ok(DELETE, {"id": created[-1]}, token=token)  # cached
    await gql.ok(DELETE, {"id": created[0]}, token=token)  # only in PostgreSQL
    entries, _ = await _cached(services, user["id"])
    assert decode_id(created[-1], "Post") not in [entry.post_id for entry in entries]
    assert await _all_posts(gql, user["username"], first=2) == list(reversed(created[1:-1]))


async def test_a_stale_cache_entry_is_skipped_and_pruned(small):
    services, gql = small
    token, user = await create_user(gql)
    created = [await create_post(gql, token=token, text=f"post {n}") for n in range(3)]
    await _all_posts(gql, user["username"], first=10)
    _, key = await _cached(services, user["id"])
    # As if a build had read the post just before it was deleted.
    ghost = Entry(decode_id(created[-1], "Post") + 1, decode_id(user["id"], "User"))
    await services.redis.zadd(key, {ghost.member: 0})
    assert await _all_posts(gql, user["username"], first=10) == list(reversed(created))
    assert ghost.member.encode() not in await services.redis.zrange(key, 0, -1)


async def test_user_posts_cursor_is_signed(gql):
    token, user = await create_user(gql)
    for n in range(3):
        await create_post(gql, token=token, text=f"post {n}")
    page = (await gql.ok(USER_POSTS, {"u": user["username"], "first": 1}))["user"]["posts"]
    tampered = page["pageInfo"]["endCursor"][:-3] + "AAA"
    assert await gql.error_code(USER_POSTS, {"u": user["username"], "first": 1, "after": tampered}) == "BAD_USER_INPUT"
    assert await gql.error_code(USER_POSTS, {"u": user["username"], "first": 0}) == "BAD_USER_INPUT"
