from __future__ import annotations

import asyncio

import pytest

from mediagraph.ids import to_global_id
from mediagraph.keys.events import engagement_stream
from tests.support.comments import physical_of, raw_comment_ref, raw_media_id, shard_execute, stored_comments
from tests.support.factories import ADD_COMMENT, add_comment, create_media, create_user
from tests.support.graphql import error_extensions

THREAD = """
query($id: ID!, $first: Int, $after: String) {
  media(id: $id) {
    commentCount
    comments(first: $first, after: $after) {
      edges { cursor node { id depth content deleted writerNickname writer { username } parent { id } } }
      pageInfo { hasNextPage endCursor }
    }
  }
}
"""
PAGE = """
query($id: ID!, $page: Int!, $size: Int) {
  media(id: $id) {
    commentPage(page: $page, size: $size) {
      page size pages hasPreviousBlock hasNextBlock comments { content }
    }
  }
}
"""
DELETE = "mutation($id: ID!) { deleteComment(id: $id) { id removed comment { id deleted content writer { id } } } }"
NODE = "query($id: ID!) { node(id: $id) { __typename id ... on Comment { content media { id } } } }"


@pytest.fixture
async def author(gql):
    return await create_user(gql, nickname="Author")


@pytest.fixture
async def media(http, author):
    token, _ = author
    return await create_media(http, token=token)


async def thread(gql, media_id, *, first=100, after=None):
    return (await gql.ok(THREAD, {"id": media_id, "first": first, "after": after}))["media"]


async def test_replies_nest_under_their_parent_in_creation_order(gql, author, media):
    token, user = author
    a = await add_comment(gql, token=token, media_id=media["id"], content="A")
    a1 = await add_comment(gql, token=token, media_id=media["id"], content="A1", parent_id=a["id"])
    b = await add_comment(gql, token=token, media_id=media["id"], content="B")
    a1a = await add_comment(gql, token=token, media_id=media["id"], content="A1a", parent_id=a1["id"])
    a2 = await add_comment(gql, token=token, media_id=media["id"], content="A2", parent_id=a["id"])
    result = await thread(gql, media["id"])
    nodes = [edge["node"] for edge in result["comments"]["edges"]]
    assert [node["content"] for node in nodes] == ["A", "A1", "A1a", "A2", "B"]
    assert [node["depth"] for node in nodes] == [1, 2, 3, 2, 1]
    assert [node["parent"] and node["parent"]["id"] for node in nodes] == [None, a["id"], a1["id"], a["id"], None]
    assert {node["writer"]["username"] for node in nodes} == {user["username"]}
    assert result["commentCount"] == 5
    assert a1a["depth"] == 3
    assert a2["depth"] == 2
    assert b["writerNickname"] == "Author"


async def test_fifty_concurrent_replies_to_one_parent_all_succeed_with_ordered_paths(gql, services, author, media):
    token, _ = author
    parent = await add_comment(gql, token=token, media_id=media["id"], content="parent")
    replies = await asyncio.gather(
        *(
            add_comment(gql, token=token, media_id=media["id"], content=f"reply {n}", parent_id=parent["id"])
            for n in range(50)
        )
    )
    assert len({reply["id"] for reply in replies}) == 50
    rows = await stored_comments(services, raw_media_id(media["id"]))
    children = [row for row in rows if row.parent_id == raw_comment_ref(parent["id"])[1]]
    assert len(children) == 50
    paths = [row.path for row in children]
    assert len(set(paths)) == 50
    # Consecutive sibling segments in creation (id) order, right after the parent's path.
    assert paths == sorted(paths)
    assert [row.id for row in children] == sorted(row.id for row in children)
    assert all(path.startswith(rows[0].path) and len(path) == 10 for path in paths)
    listed = [edge["node"]["id"] for edge in (await thread(gql, media["id"]))["comments"]["edges"]]
    assert listed[0] == parent["id"]
    assert sorted(listed[1:]) == sorted(reply["id"] for reply in replies)
    assert (await thread(gql, media["id"]))["commentCount"] == 51


async def test_replies_deeper_than_five_levels_are_rejected(gql, author, media):
    token, _ = author
    parent_id = None
    for level in range(1, 6):
        comment = await add_comment(
            gql, token=token, media_id=media["id"], content=f"level {level}", parent_id=parent_id
        )
        assert comment["depth"] == level
        parent_id = comment["id"]
    result = await gql(ADD_COMMENT, {"mediaId": media["id"], "content": "too deep", "parentId": parent_id}, token=token)
    assert error_extensions(result) == {"code": "BAD_USER_INPUT", "argument": "parentId"}
    assert "5 levels" in result["errors"][0]["message"]


@pytest.mark.parametrize("content", ["", "   ", "x" * 2001, "bell \x07", "zero\u200bwidth"])
async def test_bad_content_is_bad_user_input(gql, author, media, content):
    token, _ = author
    result = await gql(ADD_COMMENT, {"mediaId": media["id"], "content": content}, token=token)
    assert result["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert result["errors"][0]["extensions"]["argument"] == "content"


async def test_multiline_content_up_to_the_limit_is_kept(gql, author, media):
    token, _ = author
    content = "line one\nline two\t" + "x" * 1980
    assert (await add_comment(gql, token=token, media_id=media["id"], content=content))["content"] == content


async def test_commenting_needs_login_and_an_existing_media(gql, author, media):
    token, _ = author
    assert await gql.error_code(ADD_COMMENT, {"mediaId": media["id"], "content": "hi"}) == "UNAUTHENTICATED"
    missing = to_global_id("Media", 12345)
    assert await gql.error_code(ADD_COMMENT, {"mediaId": missing, "content": "hi"}, token=token) == "NOT_FOUND"
    assert await gql.error_code(ADD_COMMENT, {"mediaId": "garbage", "content": "hi"}, token=token) == "BAD_USER_INPUT"


async def test_parent_must_belong_to_the_same_media(http, gql, author, media):
    token, _ = author
    other = await create_media(http, token=token)
    parent = await add_comment(gql, token=token, media_id=other["id"], content="elsewhere")
    variables = {"mediaId": media["id"], "content": "hi", "parentId": parent["id"]}
    assert await gql.error_code(ADD_COMMENT, variables, token=token) == "BAD_USER_INPUT"
    unknown = to_global_id("Comment", raw_media_id(media["id"]), 777)
    variables = {"mediaId": media["id"], "content": "hi", "parentId": unknown}
    assert await gql.error_code(ADD_COMMENT, variables, token=token) == "NOT_FOUND"


async def test_a_full_level_is_a_clear_conflict(gql, services, author, media):
    token, _ = author
    parent = await add_comment(gql, token=token, media_id=media["id"], content="parent")
    media_id, parent_id = raw_comment_ref(parent["id"])
    physical = physical_of(services, media_id)
    for path, parent_ref in (("zzzzz", None), ("00000zzzzz", parent_id)):
        await shard_execute(
            services,
            physical,
            "INSERT INTO comments (media_id, id, logical_shard, path, parent_id, writer_id, writer_nickname, "
            "confirmed, content, created_at) VALUES (:m, :i, :l, :p, :parent, 1, 'x', true, 'last', now())",
            m=media_id,
            i=services.ids.next_id(),
            l=media_id % 64,
            p=path,
            parent=parent_ref,
        )
    for parent_global in (None, parent["id"]):
        result = await gql(
            ADD_COMMENT, {"mediaId": media["id"], "content": "one more", "parentId": parent_global}, token=token
        )
        assert result["errors"][0]["extensions"]["code"] == "CONFLICT"
        assert "full" in result["errors"][0]["message"]
    assert (await thread(gql, media["id"]))["commentCount"] == 1  # the failed attempts counted nothing


async def test_deleting_removes_leaves_and_marks_parents_until_their_last_reply_goes(gql, author, media):
    token, _ = author
    root = await add_comment(gql, token=token, media_id=media["id"], content="root")
    child = await add_comment(gql, token=token, media_id=media["id"], content="child", parent_id=root["id"])
    leaf = await add_comment(gql, token=token, media_id=media["id"], content="leaf", parent_id=child["id"])
    sibling = await add_comment(gql, token=token, media_id=media["id"], content="sibling")

    marked = (await gql.ok(DELETE, {"id": root["id"]}, token=token))["deleteComment"]
    assert marked == {
        "id": root["id"],
        "removed": False,
        "comment": {"id": root["id"], "deleted": True, "content": None, "writer": None},
    }
    result = await thread(gql, media["id"])
    shown = [edge["node"] for edge in result["comments"]["edges"]]
    assert [(node["content"], node["deleted"], node["writerNickname"]) for node in shown] == [
        (None, True, None),
        ("child", False, "Author"),
        ("leaf", False, "Author"),
        ("sibling", False, "Author"),
    ]
    assert result["commentCount"] == 3

    assert (await gql.ok(DELETE, {"id": child["id"]}, token=token))["deleteComment"]["removed"] is False
    assert (await gql.ok(DELETE, {"id": leaf["id"]}, token=token))["deleteComment"]["removed"] is True
    # The leaf was the last reply: its deleted parent and grandparent go with it.
    result = await thread(gql, media["id"])
    assert [edge["node"]["id"] for edge in result["comments"]["edges"]] == [sibling["id"]]
    assert result["commentCount"] == 1


async def test_only_the_writer_deletes_and_only_once(gql, author, media):
    token, _ = author
    comment = await add_comment(gql, token=token, media_id=media["id"])
    stranger, _ = await create_user(gql)
    assert await gql.error_code(DELETE, {"id": comment["id"]}, token=stranger) == "FORBIDDEN"
    assert await gql.error_code(DELETE, {"id": comment["id"]}) == "UNAUTHENTICATED"
    await gql.ok(DELETE, {"id": comment["id"]}, token=token)
    assert await gql.error_code(DELETE, {"id": comment["id"]}, token=token) == "NOT_FOUND"
    assert (await thread(gql, media["id"]))["commentCount"] == 0


async def test_reply_to_deleted_parent_is_rejected(gql, author, media):
    token, _ = author
    parent = await add_comment(gql, token=token, media_id=media["id"])
    await add_comment(gql, token=token, media_id=media["id"], parent_id=parent["id"])
    await gql.ok(DELETE, {"id": parent["id"]}, token=token)
    variables = {"mediaId": media["id"], "content": "late reply", "parentId": parent["id"]}
    result = await gql(ADD_COMMENT, variables, token=token)
    assert error_extensions(result) == {"code": "BAD_USER_INPUT", "argument": "parentId"}


async def test_keyset_pages_walk_the_whole_thread_without_gaps_or_repeats(gql, author, media):
    token, _ = author
    expected = []
    for n in range(4):
        root = await add_comment(gql, token=token, media_id=media["id"], content=f"r{n}")
        reply = await add_comment(gql, token=token, media_id=media["id"], content=f"r{n}.1", parent_id=root["id"])
        nested = await add_comment(gql, token=token, media_id=media["id"], content=f"r{n}.1.1", parent_id=reply["id"])
        expected += [root["id"], reply["id"], nested["id"]]
    for first in (1, 5, 12, 13):
        seen, after = [], None
        while True:
            page = (await thread(gql, media["id"], first=first, after=after))["comments"]
            seen += [edge["node"]["id"] for edge in page["edges"]]
            if not page["pageInfo"]["hasNextPage"]:
                break
            after = page["pageInfo"]["endCursor"]
        assert seen == expected


async def test_thread_cursors_are_bound_to_their_media(http, gql, author, media):
    token, _ = author
    other = await create_media(http, token=token)
    for target in (media, other):
        await add_comment(gql, token=token, media_id=target["id"])
        await add_comment(gql, token=token, media_id=target["id"])
    cursor = (await thread(gql, media["id"], first=1))["comments"]["pageInfo"]["endCursor"]
    for bad in (cursor[:-2] + "AA", "garbage"):
        assert await gql.error_code(THREAD, {"id": media["id"], "first": 1, "after": bad}) == "BAD_USER_INPUT"
    assert await gql.error_code(THREAD, {"id": other["id"], "first": 1, "after": cursor}) == "BAD_USER_INPUT"
    assert await gql.error_code(THREAD, {"id": media["id"], "first": 101}) == "BAD_USER_INPUT"


async def test_page_numbers_count_only_as_far_as_the_block_of_buttons(gql, services, author, media):
    token, user = author
    await add_comment(gql, token=token, media_id=media["id"], content="first")
    from mediagraph.ids import decode_id
    from tests.support.comments import seed_root_comments

    # 24 more, straight into the shard after the first one's path "00000".
    media_id = raw_media_id(media["id"])
    await shard_execute(
        services, physical_of(services, media_id), "DELETE FROM comments WHERE media_id = :m", m=media_id
    )
    await shard_execute(
        services, physical_of(services, media_id), "DELETE FROM comment_counts WHERE media_id = :m", m=media_id
    )
    await seed_root_comments(
        services, media_id=media_id, writer_id=decode_id(user["id"], "User"), nickname="Author", count=25
    )

    first = (await gql.ok(PAGE, {"id": media["id"], "page": 1, "size": 2}))["media"]["commentPage"]
    assert first["pages"] == list(range(1, 11))
    assert (first["hasPreviousBlock"], first["hasNextBlock"]) == (False, True)
    assert [c["content"] for c in first["comments"]] == ["seeded 0", "seeded 1"]

    last_block = (await gql.ok(PAGE, {"id": media["id"], "page": 12, "size": 2}))["media"]["commentPage"]
    assert last_block["pages"] == [11, 12, 13]
    assert (last_block["hasPreviousBlock"], last_block["hasNextBlock"]) == (True, False)
    assert [c["content"] for c in last_block["comments"]] == ["seeded 22", "seeded 23"]

    tail = (await gql.ok(PAGE, {"id": media["id"], "page": 13, "size": 2}))["media"]["commentPage"]
    assert [c["content"] for c in tail["comments"]] == ["seeded 24"]
    beyond = (await gql.ok(PAGE, {"id": media["id"], "page": 21, "size": 2}))["media"]["commentPage"]
    assert beyond["comments"] == []
    assert beyond["pages"] == []
    assert beyond["hasPreviousBlock"] is True

    exact = (await gql.ok(PAGE, {"id": media["id"], "page": 1, "size": 5}))["media"]["commentPage"]
    assert exact["pages"] == [1, 2, 3, 4, 5]
    assert exact["hasNextBlock"] is False


@pytest.mark.parametrize(
    ("page", "size", "argument"), [(0, 10, "page"), (10_001, 10, "page"), (1, 0, "size"), (1, 101, "size")]
)
async def test_page_number_and_size_are_bounded(gql, media, page, size, argument):
    result = await gql(PAGE, {"id": media["id"], "page": page, "size": size})
    assert error_extensions(result) == {"code": "BAD_USER_INPUT", "argument": argument}


async def test_comments_are_nodes_with_composite_ids(gql, author, media):
    token, _ = author
    comment = await add_comment(gql, token=token, media_id=media["id"], content="find me")
    found = (await gql.ok(NODE, {"id": comment["id"]}))["node"]
    assert found == {"__typename": "Comment", "id": comment["id"], "content": "find me", "media": {"id": media["id"]}}
    media_id, comment_id = raw_comment_ref(comment["id"])
    assert (await gql.ok(NODE, {"id": to_global_id("Comment", media_id, comment_id + 1)}))["node"] is None
    assert await gql.error_code(NODE, {"id": to_global_id("Comment", comment_id)}) == "BAD_USER_INPUT"
    assert await gql.error_code(DELETE, {"id": to_global_id("Media", media_id)}, token="x") == "BAD_USER_INPUT"


async def test_adding_and_deleting_publish_engagement_events(gql, services, author, media):
    token, _ = author
    media_id = raw_media_id(media["id"])
    comment = await add_comment(gql, token=token, media_id=media["id"])
    await gql.ok(DELETE, {"id": comment["id"]}, token=token)
    entries = await services.redis.xrevrange(engagement_stream(services.keys), count=200)
    mine = [fields for _, fields in entries if fields[b"media_id"] == str(media_id).encode()]
    assert [(f[b"kind"], f[b"delta"]) for f in reversed(mine)] == [(b"comment", b"1"), (b"comment", b"-1")]


async def test_deleting_the_media_deletes_its_comments(http, gql, services, author):
    token, _ = author
    media = await create_media(http, token=token)
    await add_comment(gql, token=token, media_id=media["id"])
    await gql.ok("mutation($id: ID!) { deleteMedia(id: $id) { id } }", {"id": media["id"]}, token=token)
    assert await stored_comments(services, raw_media_id(media["id"])) == []


CREATE_COMMENT = """
mutation($mediaId: ID!, $content: String!, $parentId: ID) {
  createComment(mediaId: $mediaId, content: $content, parentId: $parentId) { id depth content }
}
"""


async def test_create_comment_is_add_comment_under_the_create_and_delete_names(gql, http):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    root = (await gql.ok(CREATE_COMMENT, {"mediaId": media["id"], "content": "root"}, token=token))["createComment"]
    reply = {"mediaId": media["id"], "content": "reply", "parentId": root["id"]}
    child = (await gql.ok(CREATE_COMMENT, reply, token=token))["createComment"]
    assert (root["depth"], child["depth"], child["content"]) == (1, 2, "reply")
