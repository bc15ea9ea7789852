from __future__ import annotations

import asyncio

from sqlalchemy import func, select
from sqlmodel import col

from mediagraph.db.feeds import Follow, FollowCount
from tests.support.factories import create_user, follow

FOLLOW = "mutation($id: ID!) { follow(userId: $id) { id followerCount followingCount viewerFollows } }"
UNFOLLOW = "mutation($id: ID!) { unfollow(userId: $id) { id followerCount viewerFollows } }"
COUNTS = "query($u: String!) { user(username: $u) { followerCount followingCount } }"
FOLLOWERS = """
query($u: String!, $first: Int, $after: String) {
  user(username: $u) {
    followers(first: $first, after: $after) {
      edges { cursor followedAt node { username followerCount followingCount viewerFollows } }
      pageInfo { hasNextPage endCursor }
    }
  }
}
"""
FOLLOWING = """
query($u: String!) { user(username: $u) { following(first: 50) { edges { node { username } } } } }
"""


async def _counts(gql, username):
    user = (await gql.ok(COUNTS, {"u": username}))["user"]
    return user["followerCount"], user["followingCount"]


async def _stored_counts(services, user_id_raw):
    async with services.databases.main_session() as session:
        rows = await session.execute(
            select(func.count()).select_from(Follow).where(col(Follow.followee_id) == user_id_raw)
        )
        followers = rows.scalar_one()
        counted = await session.get(FollowCount, user_id_raw)
    return followers, counted.follower_count if counted else 0


async def test_follow_is_idempotent_and_counts_move_once(gql):
    token, _ = await create_user(gql)
    _, star = await create_user(gql)
    first = (await gql.ok(FOLLOW, {"id": star["id"]}, token=token))["follow"]
    again = (await gql.ok(FOLLOW, {"id": star["id"]}, token=token))["follow"]
    assert first == again == {"id": star["id"], "followerCount": 1, "followingCount": 0, "viewerFollows": True}
    assert await _counts(gql, star["username"]) == (1, 0)


async def test_unfollow_is_idempotent_and_counts_return_to_zero(gql):
    token, fan = await create_user(gql)
    _, star = await create_user(gql)
    await follow(gql, token=token, user_id=star["id"])
    for _ in range(2):
        result = (await gql.ok(UNFOLLOW, {"id": star["id"]}, token=token))["unfollow"]
        assert result == {"id": star["id"], "followerCount": 0, "viewerFollows": False}
    assert await _counts(gql, star["username"]) == (0, 0)
    assert await _counts(gql, fan["username"]) == (0, 0)


async def test_following_yourself_is_rejected(gql):
    token, me = await create_user(gql)
    assert await gql.error_code(FOLLOW, {"id": me["id"]}, token=token) == "BAD_USER_INPUT"
    assert await _counts(gql, me["username"]) == (0, 0)


async def test_follow_needs_a_login_and_an_existing_user(gql):
    token, user = await create_user(gql)
    assert await gql.error_code(FOLLOW, {"id": user["id"]}) == "UNAUTHENTICATED"
    missing = "VXNlcjo5OTk5OTk5OTk5"  # User:9999999999
    assert await gql.error_code(FOLLOW, {"id": missing}, token=token) == "NOT_FOUND"
    assert await gql.error_code(FOLLOW, {"id": "not-an-id"}, token=token) == "BAD_USER_INPUT"


async def test_concurrent_follows_and_unfollows_keep_counters_exact(gql, services):
    _, star = await create_user(gql)
    fans = [await create_user(gql) for _ in range(8)]
    # Everyone follows twice at once, then half unfollow twice at once, crossing follows too.
    await asyncio.gather(*(gql(FOLLOW, {"id": star["id"]}, token=token) for token, _ in fans for _ in range(2)))
    await asyncio.gather(
        *(gql(UNFOLLOW, {"id": star["id"]}, token=token) for token, _ in fans[:4] for _ in range(2)),
        *(gql(FOLLOW, {"id": fan["id"]}, token=fans[0][0]) for _, fan in fans[1:]),
    )
    assert await _counts(gql, star["username"]) == (4, 0)
    assert await _counts(gql, fans[0][1]["username"]) == (0, 7)
    from mediagraph.ids import decode_id

    stored, counted = await _stored_counts(services, decode_id(star["id"], "User"))
    assert stored == counted == 4


async def test_followers_connection_pages_newest_first_with_counts(gql, count_queries):
    star_token, star = await create_user(gql)
    fans = [await create_user(gql) for _ in range(5)]
    for token, _ in fans:
        await follow(gql, token=token, user_id=star["id"])
    await follow(gql, token=star_token, user_id=fans[0][1]["id"])

    names, after = [], None
    count_queries.clear()
    while True:
        page = (await gql.ok(FOLLOWERS, {"u": star["username"], "first": 2, "after": after}, token=star_token))["user"]
        connection = page["followers"]
        names += [edge["node"]["username"] for edge in connection["edges"]]
        if not connection["pageInfo"]["hasNextPage"]:
            break
        after = connection["pageInfo"]["endCursor"]
    assert names == [fan["username"] for _, fan in reversed(fans)]
    # Per page: the user, the follows with their users, the counts, viewerFollows; never per row.
    assert len(count_queries) <= 4 * 3

    first_page = (await gql.ok(FOLLOWERS, {"u": star["username"], "first": 5}, token=star_token))["user"]["followers"]
    oldest = first_page["edges"][-1]["node"]
    assert oldest == {
        "username": fans[0][1]["username"],
        "followerCount": 1,
        "followingCount": 1,
        "viewerFollows": True,
    }
    following = (await gql.ok(FOLLOWING, {"u": fans[0][1]["username"]}))["user"]["following"]["edges"]
    assert [edge["node"]["username"] for edge in following] == [star["username"]]


async def test_followers_cursor_from_another_connection_is_rejected(gql):
    token, star = await create_user(gql)
    fan_token, fan = await create_user(gql)
    await follow(gql, token=fan_token, user_id=star["id"])
    await follow(gql, token=token, user_id=fan["id"])
    page = (await gql.ok(FOLLOWERS, {"u": star["username"], "first": 1}))["user"]["followers"]
    cursor = page["edges"][0]["cursor"]
    query = "query($u: String!, $a: String) { user(username: $u) { following(after: $a) { edges { cursor } } } }"
    assert await gql.error_code(query, {"u": star["username"], "a": cursor}) == "BAD_USER_INPUT"
    assert await gql.error_code(FOLLOWERS, {"u": star["username"], "after": cursor[:-2] + "xx"}) == "BAD_USER_INPUT"


FOLLOW_TOTALS = """
query($u: String!) {
  user(username: $u) { followerCount followers(first: 1) { totalCount } following(last: 1) { totalCount } }
}
"""


async def test_follow_connections_count_every_edge(gql):
    (star_token, star), fans = await create_user(gql), [await create_user(gql) for _ in range(3)]
    for token, _ in fans:
        await follow(gql, token=token, user_id=star["id"])
    await follow(gql, token=star_token, user_id=fans[0][1]["id"])
    user = (await gql.ok(FOLLOW_TOTALS, {"u": star["username"]}))["user"]
    assert user == {"followerCount": 3, "followers": {"totalCount": 3}, "following": {"totalCount": 1}}
