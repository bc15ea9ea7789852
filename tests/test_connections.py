"""Relay cursor connections: every keyset connection pages both ways with the same edges, and the
arguments follow Relay's rules (one direction at a time; the ranked media sorts forward only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.factories import (
    add_comment,
    create_media,
    create_post,
    create_user,
    define_leaderboard,
    follow,
    service_token,
    submit_score,
    unique_name,
)
from tests.support.graphql import GraphQLClient

CONNECTION = "edges { cursor node { id } } pageInfo { hasNextPage hasPreviousPage startCursor endCursor }"
ARGS = "$first: Int, $after: String, $last: Int, $before: String"
PAGE = "first: $first, after: $after, last: $last, before: $before"

MEDIA_LIST = f"query($tags: [String!], {ARGS}) {{ mediaList(tags: $tags, {PAGE}) {{ {CONNECTION} }} }}"
USER = "query($name: String!, {args}) {{ user(username: $name) {{ {field}({page}) {{ {connection} }} }} }}"
MY_BOOKMARKS = f"query({ARGS}) {{ me {{ bookmarks({PAGE}) {{ {CONNECTION} }} }} }}"
THREAD = f"query($id: ID!, {ARGS}) {{ media(id: $id) {{ comments({PAGE}) {{ {CONNECTION} }} }} }}"
NEWSFEED = f"query({ARGS}) {{ newsfeed({PAGE}) {{ {CONNECTION} }} }}"
TOP = f"query($name: String!, {ARGS}) {{ leaderboard(name: $name) {{ top({PAGE}) {{ {CONNECTION} }} }} }}"
FOLLOWERS = (
    f"query($name: String!, {ARGS}) {{ user(username: $name) {{ followers({PAGE}) "
    "{ edges { cursor node { id } } pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } } }"
)
RANKED = f"query({ARGS}) {{ mediaList(sort: VIEWS, {PAGE}) {{ {CONNECTION} }} }}"


def user_field(field: str) -> str:
    return USER.format(args=ARGS, field=field, page=PAGE, connection=CONNECTION)


Fetch = Callable[[dict[str, Any]], Any]


def connection_at(*path: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def dig(data: dict[str, Any]) -> dict[str, Any]:
        for key in path:
            data = data[key]
        return data

    return dig


async def forward_and_backward(
    gql: GraphQLClient, query: str, variables: dict[str, Any], dig, *, size: int = 2, token: str | None = None
) -> tuple[list[str], list[str]]:
    """Every node id paging forward from the start, and paging backward from the end (put back in order)."""
    forward: list[str] = []
    after = None
    while True:
        page = dig(await gql.ok(query, {**variables, "first": size, "after": after}, token=token))
        info = page["pageInfo"]
        assert info["hasPreviousPage"] is (after is not None)
        edges = page["edges"]
        assert info["startCursor"] == (edges[0]["cursor"] if edges else None)
        assert info["endCursor"] == (edges[-1]["cursor"] if edges else None)
        forward += [edge["node"]["id"] for edge in edges]
        if not info["hasNextPage"]:
            break
        after = info["endCursor"]
    backward: list[str] = []
    before = None
    while True:
        page = dig(await gql.ok(query, {**variables, "last": size, "before": before}, token=token))
        info = page["pageInfo"]
        assert info["hasNextPage"] is (before is not None)
        edges = page["edges"]
        assert len(edges) <= size
        assert info["startCursor"] == (edges[0]["cursor"] if edges else None)
        backward = [edge["node"]["id"] for edge in edges] + backward
        if not info["hasPreviousPage"]:
            break
        before = info["startCursor"]
    return forward, backward


async def test_newest_media_own_media_and_bookmarks_page_both_ways(gql, http):
    token, user = await create_user(gql)
    tag = unique_name("both").lower()
    media = [await create_media(http, token=token, tags=[tag]) for _ in range(5)]
    for item in media:
        await gql.ok("mutation($id: ID!) { bookmark(mediaId: $id) { id } }", {"id": item["id"]}, token=token)
    newest_first = [item["id"] for item in reversed(media)]

    forward, backward = await forward_and_backward(gql, MEDIA_LIST, {"tags": [tag]}, connection_at("mediaList"))
    assert forward == backward == newest_first
    dig = connection_at("user", "media")
    forward, backward = await forward_and_backward(gql, user_field("media"), {"name": user["username"]}, dig)
    assert forward == backward == newest_first
    forward, backward = await forward_and_backward(gql, MY_BOOKMARKS, {}, connection_at("me", "bookmarks"), token=token)
    assert forward == backward == newest_first


async def test_a_backward_page_from_a_cursor_holds_the_edges_just_before_it(gql, http):
    token, _ = await create_user(gql)
    tag = unique_name("before").lower()
    ids = [(await create_media(http, token=token, tags=[tag]))["id"] for _ in range(5)][::-1]
    page = (await gql.ok(MEDIA_LIST, {"tags": [tag], "first": 4}))["mediaList"]
    cursor = page["edges"][3]["cursor"]
    back = (await gql.ok(MEDIA_LIST, {"tags": [tag], "last": 2, "before": cursor}))["mediaList"]
    assert [edge["node"]["id"] for edge in back["edges"]] == ids[1:3]
    assert back["pageInfo"] == {
        "hasNextPage": True,
        "hasPreviousPage": True,
        "startCursor": page["edges"][1]["cursor"],
        "endCursor": page["edges"][2]["cursor"],
    }


async def test_comment_threads_and_a_writers_comments_page_both_ways(gql, http):
    token, user = await create_user(gql)
    owners = [await create_user(gql) for _ in range(3)]
    # Media of several uploaders land on different shards: a writer's comments span them.
    media = [await create_media(http, token=owner) for owner, _ in owners]
    first = await add_comment(gql, token=token, media_id=media[0]["id"], content="first")
    await add_comment(gql, token=token, media_id=media[0]["id"], content="second")
    await add_comment(gql, token=token, media_id=media[0]["id"], content="reply", parent_id=first["id"])
    for item in media[1:]:
        await add_comment(gql, token=token, media_id=item["id"])
        await add_comment(gql, token=token, media_id=item["id"])

    forward, backward = await forward_and_backward(gql, THREAD, {"id": media[0]["id"]}, connection_at("media", "comments"))
    assert forward == backward
    assert len(forward) == 3
    dig = connection_at("user", "comments")
    forward, backward = await forward_and_backward(gql, user_field("comments"), {"name": user["username"]}, dig)
    assert forward == backward
    assert len(forward) == 7


async def test_posts_the_news_feed_and_followers_page_both_ways(gql):
    (author_token, author), (fan_token, _) = await create_user(gql), await create_user(gql)
    other_token, other = await create_user(gql)
    for followee in (author, other):
        await follow(gql, token=fan_token, user_id=followee["id"])
    posts = []
    for n in range(3):
        posts.append(await create_post(gql, token=author_token, text=f"author {n}"))
        posts.append(await create_post(gql, token=other_token, text=f"other {n}"))
    extra_fans = [await create_user(gql) for _ in range(3)]
    for token, _ in extra_fans:
        await follow(gql, token=token, user_id=author["id"])

    dig = connection_at("user", "posts")
    forward, backward = await forward_and_backward(gql, user_field("posts"), {"name": author["username"]}, dig)
    assert forward == backward == posts[::2][::-1]
    forward, backward = await forward_and_backward(gql, NEWSFEED, {}, connection_at("newsfeed"), token=fan_token)
    assert forward == backward == posts[::-1]
    dig = connection_at("user", "followers")
    forward, backward = await forward_and_backward(gql, FOLLOWERS, {"name": author["username"]}, dig)
    assert forward == backward
    assert len(forward) == 4


async def test_leaderboard_top_pages_both_ways_in_rank_order(gql, settings):
    service = service_token(settings)
    board = (await define_leaderboard(gql, token=service, partition_bounds=[10.0, 20.0]))["name"]
    players = [await create_user(gql) for _ in range(5)]
    for score, (_, player) in zip((5, 25, 15, 8, 30), players, strict=True):
        await submit_score(gql, token=service, board=board, user_id=player["id"], score=score)
    forward, backward = await forward_and_backward(gql, TOP, {"name": board}, connection_at("leaderboard", "top"))
    assert forward == backward
    assert len(forward) == 5


@pytest.mark.parametrize(
    ("variables", "argument"),
    [
        ({"first": 2, "last": 2}, "last"),
        ({"after": "x", "before": "y"}, "before"),
        ({"first": 2, "before": "y"}, "before"),
        ({"last": 0}, "last"),
        ({"last": 101}, "last"),
    ],
)
async def test_one_direction_at_a_time_within_the_cap(gql, variables, argument):
    result = await gql(MEDIA_LIST, {"tags": ["nothing"], **variables})
    error = result["errors"][0]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert error["extensions"]["argument"] == argument


async def test_ranked_media_lists_refuse_to_page_backward_and_say_why(gql):
    for variables in ({"last": 2}, {"before": "x"}):
        result = await gql(RANKED, variables)
        error = result["errors"][0]
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
        assert "forward only" in error["message"]
        assert "omitted" in error["message"]
    page = (await gql.ok(RANKED, {"first": 1}))["mediaList"]
    assert page["pageInfo"]["hasPreviousPage"] is False
    assert page["pageInfo"]["startCursor"] == page["edges"][0]["cursor"]
