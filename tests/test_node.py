"""`node(id:)` and `nodes(ids:)`: refetching any object by its global id."""

from __future__ import annotations

import base64
import uuid

from mediagraph.ids import decode_id, parse_global_id, to_global_id
from tests.support.factories import (
    add_comment,
    create_media,
    create_post,
    create_user,
    define_leaderboard,
    service_token,
    submit_score,
)
from tests.support.graphql import error_extensions

NODES = """
query Nodes($ids: [ID!]!) {
  nodes(ids: $ids) {
    __typename
    id
    ... on User { username }
    ... on Media { title }
    ... on Post { text }
  }
}
"""

NODE = "query Node($id: ID!) { node(id: $id) { __typename id } }"


async def test_nodes_answer_in_order_with_null_for_ids_that_name_nothing(gql, http):
    token, user = await create_user(gql)
    media = await create_media(http, token=token, title="Harbour")
    post_id = await create_post(gql, token=token, text="evening")
    missing_media = to_global_id("Media", 9_999_999_999)
    unknown_type = to_global_id("Spaceship", 1)
    ids = [post_id, missing_media, user["id"], unknown_type, media["id"], post_id]
    nodes = (await gql.ok(NODES, {"ids": ids}))["nodes"]
    assert nodes == [
        {"__typename": "Post", "id": post_id, "text": "evening"},
        None,
        {"__typename": "User", "id": user["id"], "username": user["username"]},
        None,
        {"__typename": "Media", "id": media["id"], "title": "Harbour"},
        {"__typename": "Post", "id": post_id, "text": "evening"},
    ]


async def test_nodes_of_an_empty_list_is_an_empty_list(gql):
    assert (await gql.ok(NODES, {"ids": []}))["nodes"] == []


async def test_nodes_refuses_more_ids_than_a_page_with_a_code(gql, settings):
    _, user = await create_user(gql)
    limit = settings.max_page_size
    assert len((await gql.ok(NODES, {"ids": [user["id"]] * limit}))["nodes"]) == limit
    result = await gql(NODES, {"ids": [user["id"]] * (limit + 1)})
    assert result["data"] is None
    assert error_extensions(result) == {"code": "BAD_USER_INPUT", "argument": "ids", "limit": limit}


async def test_a_malformed_id_is_bad_input_not_an_internal_error(gql):
    assert await gql.error_code(NODES, {"ids": ["not an id!"]}) == "BAD_USER_INPUT"
    assert await gql.error_code(NODE, {"id": "not an id!"}) == "BAD_USER_INPUT"


async def test_ids_with_parts_of_the_wrong_kind_are_bad_input(gql):
    session = uuid.uuid4()
    upper_case = base64.urlsafe_b64encode(f"Play:1:2:{str(session).upper()}".encode()).decode().rstrip("=")
    for wrong in (
        to_global_id("Play", 1, 2, 3),  # an integer where a play's session uuid goes
        to_global_id("Play", 1, session),  # a part missing
        to_global_id("Media", session),  # a uuid where a snowflake goes
        upper_case,  # not the one form ids are written in
    ):
        assert await gql.error_code(NODE, {"id": wrong}) == "BAD_USER_INPUT", wrong


async def test_one_bad_id_in_nodes_nulls_its_own_place_only(gql):
    _, user = await create_user(gql)
    result = await gql(NODES, {"ids": [user["id"], "not an id!"]})
    assert result["data"]["nodes"] == [{"__typename": "User", "id": user["id"], "username": user["username"]}, None]
    [error] = result["errors"]
    assert (error["extensions"]["code"], error["path"]) == ("BAD_USER_INPUT", ["nodes", 1])


async def test_node_answers_null_for_an_id_that_names_nothing(gql):
    assert (await gql.ok(NODE, {"id": to_global_id("Media", 9_999_999_999)}))["node"] is None


LEADERBOARD_NODES = """
query Board($name: String!) {
  leaderboard(name: $name) {
    id name period
    top(first: 5) { edges { node { id rank score userId leaderboard { id } } } }
  }
}
"""
REFETCH_ENTRY = """
query Refetch($ids: [ID!]!) {
  nodes(ids: $ids) {
    __typename id
    ... on LeaderboardEntry { rank score userId }
    ... on Leaderboard { name period entryCount: size }
    ... on CommentPage { page size pages comments { content } }
    ... on LiveViewers { viewers media { id } }
    ... on LiveChannelViewers { viewers user { id } }
  }
}
"""
COMMENT_PAGE = "query($id: ID!) { media(id: $id) { commentPage(page: 1, size: 2) { id page size pages } } }"
LIVE = "query($id: ID!) { media(id: $id) { liveViewers { id viewers } uploader { liveChannelViewers { id viewers } } } }"


async def test_leaderboards_and_their_entries_are_refetchable_by_the_ids_reads_give(gql, settings):
    service = service_token(settings)
    board = (await define_leaderboard(gql, token=service, period="DAILY"))["name"]
    players = [user for _, user in [await create_user(gql) for _ in range(2)]]
    await submit_score(gql, token=service, board=board, user_id=players[0]["id"], score=10)
    await submit_score(gql, token=service, board=board, user_id=players[1]["id"], score=20)
    read = (await gql.ok(LEADERBOARD_NODES, {"name": board}))["leaderboard"]
    entries = [edge["node"] for edge in read["top"]["edges"]]
    assert [entry["userId"] for entry in entries] == [players[1]["id"], players[0]["id"]]
    assert {entry["leaderboard"]["id"] for entry in entries} == {read["id"]}
    # Ids are stable: reading again gives the same ones.
    assert (await gql.ok(LEADERBOARD_NODES, {"name": board}))["leaderboard"] == read

    nodes = (await gql.ok(REFETCH_ENTRY, {"ids": [read["id"], entries[0]["id"], entries[1]["id"]]}))["nodes"]
    assert nodes == [
        {"__typename": "Leaderboard", "id": read["id"], "name": board, "period": read["period"], "entryCount": 2},
        {"__typename": "LeaderboardEntry", "id": entries[0]["id"], "rank": 1, "score": 20.0, "userId": players[1]["id"]},
        {"__typename": "LeaderboardEntry", "id": entries[1]["id"], "rank": 2, "score": 10.0, "userId": players[0]["id"]},
    ]


async def test_leaderboard_ids_that_name_no_board_period_or_standing_are_null(gql, settings):
    service = service_token(settings)
    definition = await define_leaderboard(gql, token=service, period="MONTHLY")
    _, user = await create_user(gql)
    board_id = decode_id(definition["id"], "LeaderboardDefinition")
    this_month = (await gql.ok(LEADERBOARD_NODES, {"name": definition["name"]}))["leaderboard"]["id"]
    _, (_, period_code) = parse_global_id(this_month)
    ids = [
        to_global_id("Leaderboard", board_id, period_code + 1),  # the 2nd of a month starts no monthly period
        to_global_id("Leaderboard", board_id, period_code + 400),  # a period not started yet
        to_global_id("Leaderboard", 9_999_999_999, period_code),  # no such board
        to_global_id("LeaderboardEntry", board_id, period_code, decode_id(user["id"], "User")),  # no score
    ]
    assert (await gql.ok(REFETCH_ENTRY, {"ids": ids}))["nodes"] == [None, None, None, None]
    assert await gql.error_code(NODE, {"id": to_global_id("LeaderboardEntry", board_id, period_code)}) == (
        "BAD_USER_INPUT"
    )


async def test_comment_pages_and_live_viewer_counts_are_refetchable(gql, http):
    token, user = await create_user(gql)
    media = await create_media(http, token=token)
    for n in range(3):
        await add_comment(gql, token=token, media_id=media["id"], content=f"comment {n}")
    page = (await gql.ok(COMMENT_PAGE, {"id": media["id"]}))["media"]["commentPage"]
    live = (await gql.ok(LIVE, {"id": media["id"]}))["media"]
    ids = [page["id"], live["liveViewers"]["id"], live["uploader"]["liveChannelViewers"]["id"]]
    assert (await gql.ok(REFETCH_ENTRY, {"ids": ids}))["nodes"] == [
        {
            "__typename": "CommentPage",
            "id": page["id"],
            "page": 1,
            "size": 2,
            "pages": [1, 2],
            "comments": [{"content": "comment 0"}, {"content": "comment 1"}],
        },
        {"__typename": "LiveViewers", "id": ids[1], "viewers": 0, "media": {"id": media["id"]}},
        {"__typename": "LiveChannelViewers", "id": ids[2], "viewers": 0, "user": {"id": user["id"]}},
    ]
    raw_media = decode_id(media["id"], "Media")
    beyond = [to_global_id("CommentPage", raw_media, 1, 1000), to_global_id("LiveViewers", 9_999_999_999)]
    assert (await gql.ok(REFETCH_ENTRY, {"ids": beyond}))["nodes"] == [None, None]


async def test_a_failed_field_leaves_the_fields_sharing_its_loads_answered(gql):
    # `followers(last: 0)` fails and nulls its User, so graphql-core cancels that User's other
    # fields; its `followingCount` waits on the same load as the first User's, which must still
    # be answered (cancelling the shared load failed the whole request with CancelledError).
    _, user = await create_user(gql)
    query = """
    query($id: ID!) {
      node(id: $id) { ... on User { followingCount } }
      nodes(ids: [$id]) { ... on User { followingCount followers(last: 0) { totalCount } } }
    }
    """
    body = await gql(query, {"id": user["id"]})
    assert body["data"] == {"node": {"followingCount": 0}, "nodes": [None]}
    assert [error["extensions"]["code"] for error in body["errors"]] == ["BAD_USER_INPUT"]
