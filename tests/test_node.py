"""`node(id:)` and `nodes(ids:)`: refetching any object by its global id."""

from __future__ import annotations

from mediagraph.ids import to_global_id
from tests.support.factories import create_media, create_post, create_user

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
    assert result["errors"][0]["extensions"] == {"code": "BAD_USER_INPUT", "argument": "ids", "limit": limit}


async def test_a_malformed_id_is_bad_input_not_an_internal_error(gql):
    assert await gql.error_code(NODES, {"ids": ["not an id!"]}) == "BAD_USER_INPUT"
    assert await gql.error_code(NODE, {"id": "not an id!"}) == "BAD_USER_INPUT"


async def test_node_answers_null_for_an_id_that_names_nothing(gql):
    assert (await gql.ok(NODE, {"id": to_global_id("Media", 9_999_999_999)}))["node"] is None
