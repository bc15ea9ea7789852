from __future__ import annotations

import pytest
from sqlalchemy import insert

from mediagraph import security
from mediagraph.db.base import utcnow
from mediagraph.db.feeds import Follow, FollowCount
from mediagraph.db.users import User
from mediagraph.ids import decode_id, snowflake_time
from mediagraph.keys.feeds import author_feed, floor_marker
from tests.support.apps import app_with, private_prefix
from tests.support.factories import create_media, create_post, create_user, follow, followed_author
from tests.support.feeds import (
    NEWSFEED,
    cached_newsfeed,
    drain_fanout,
    first_page,
    newsfeed_ids,
    post_ids,
    posting_days_ago,
    raw,
)

DELETE = "mutation($id: ID!) { deletePost(id: $id) { id } }"
UNFOLLOW = "mutation($id: ID!) { unfollow(userId: $id) { id } }"
USER_POSTS = "query($u: String!) { user(username: $u) { posts(first: 1) { edges { node { id } } } } }"


def _age_in_days(snowflake: int) -> float:
    return (utcnow() - snowflake_time(snowflake)).total_seconds() / 86400


@pytest.fixture(scope="module")
async def small(settings):
    """News feeds of 5 entries and author feeds of 4, so every scroll crosses into PostgreSQL."""
    overrides = {"redis_prefix": private_prefix(settings, "newsfeed"), "newsfeed_size": 5, "author_feed_size": 4}
    async with app_with(settings, **overrides) as app:
        yield app


@pytest.fixture(scope="module")
async def celebrities(settings):
    """Two followers make a celebrity here."""
    overrides = {"redis_prefix": private_prefix(settings, "celebrity"), "celebrity_followers": 2, "newsfeed_size": 5}
    async with app_with(settings, **overrides) as app:
        yield app


async def test_newsfeed_needs_a_login_and_valid_paging(gql):
    assert await gql.error_code(NEWSFEED, {}) == "UNAUTHENTICATED"
    token, _ = await create_user(gql)
    assert await gql.error_code(NEWSFEED, {"first": 0}, token=token) == "BAD_USER_INPUT"
    assert await gql.error_code(NEWSFEED, {"first": 101}, token=token) == "BAD_USER_INPUT"
    assert await gql.error_code(NEWSFEED, {"after": "forged"}, token=token) == "BAD_USER_INPUT"
    assert (await gql.ok(NEWSFEED, {}, token=token))["newsfeed"]["edges"] == []


async def test_first_page_holds_ten_posts_by_default(gql, services):
    token, _ = await create_user(gql)
    author_token, author = await create_user(gql)
    await follow(gql, token=token, user_id=author["id"])
    created = [await create_post(gql, token=author_token, text=f"post {n}") for n in range(12)]
    page = (await gql.ok("query { newsfeed { edges { node { id } } pageInfo { hasNextPage } } }", token=token))[
        "newsfeed"
    ]
    assert [edge["node"]["id"] for edge in page["edges"]] == list(reversed(created))[:10]
    assert page["pageInfo"]["hasNextPage"] is True


async def test_fanout_reaches_cached_feeds_and_creates_none(small):
    services, gql = small
    (author_token, _), [(reader_token, reader), (_, idle)] = await followed_author(gql, followers=2)
    assert await first_page(gql, token=reader_token) == []  # builds the reader's (empty) feed
    post = await create_post(gql, token=author_token, text="fresh")
    await drain_fanout(services)
    assert post_ids(await cached_newsfeed(services, reader["id"])) == raw([post])
    assert await cached_newsfeed(services, idle["id"]) is None
    assert await first_page(gql, token=reader_token) == [post]


async def test_missing_feed_is_built_from_one_day_widened_to_three_while_sparse(small):
    services, gql = small
    (author_token, _), [(reader_token, reader)] = await followed_author(gql)
    by_age = {}
    for days in (3.5, 2.5, 1.5, 0.5):
        with posting_days_ago(services, days):
            by_age[days] = await create_post(gql, token=author_token, text=f"{days} days old")
    assert await first_page(gql, token=reader_token, first=1) == [by_age[0.5]]
    cached = await cached_newsfeed(services, reader["id"])
    # Widened to three days: the 3.5-day-old post is PostgreSQL's, below the floor marker.
    assert post_ids(cached) == raw([by_age[0.5], by_age[1.5], by_age[2.5]])
    floor = cached[-1]
    assert floor.author_id is None
    assert 2.9 < _age_in_days(floor.post_id) < 3.1
    assert await newsfeed_ids(gql, token=reader_token, first=1) == [by_age[d] for d in (0.5, 1.5, 2.5, 3.5)]


async def test_a_busy_day_stops_the_window_from_widening(gql, services):
    (author_token, _), [(reader_token, reader)] = await followed_author(gql)
    with posting_days_ago(services, 1.5):
        older = await create_post(gql, token=author_token, text="yesterday")
    today = [await create_post(gql, token=author_token, text=f"today {n}") for n in range(31)]
    await first_page(gql, token=reader_token)
    cached = await cached_newsfeed(services, reader["id"])
    assert post_ids(cached) == list(reversed(raw(today)))
    # The floor marks one day back, not two: the busy day was enough.
    assert cached[-1].author_id is None
    assert cached[-1].post_id > raw([older])[0]
    assert await newsfeed_ids(gql, token=reader_token, first=7) == [*reversed(today), older]


async def test_scrolling_past_the_cache_into_postgresql_has_no_duplicates_or_gaps(small):
    services, gql = small
    reader_token, reader = await create_user(gql)
    authors = [await create_user(gql) for _ in range(3)]
    for _, author in authors:
        await follow(gql, token=reader_token, user_id=author["id"])
    stranger_token, _ = await create_user(gql)
    expected = []
    for round_ in range(4):
        for token, _ in authors:
            expected.append(await create_post(gql, token=token, text=f"round {round_}"))
        await create_post(gql, token=stranger_token, text="not followed")
    await first_page(gql, token=reader_token)  # builds the 5-entry feed
    for token, _ in authors:  # fanned out on top of it
        expected.append(await create_post(gql, token=token, text="later"))
    await drain_fanout(services)
    await gql.ok(DELETE, {"id": expected[-1]}, token=authors[-1][0])  # in the cache
    await gql.ok(DELETE, {"id": expected[1]}, token=authors[1][0])  # only in PostgreSQL
    await drain_fanout(services)
    wanted = list(reversed([post for post in expected if post not in (expected[-1], expected[1])]))
    assert len(post_ids(await cached_newsfeed(services, reader["id"]))) <= 5
    for first in (1, 2, 3, 4, 5, 6, 50):
        assert await newsfeed_ids(gql, token=reader_token, first=first) == wanted


async def test_feeds_are_trimmed_to_the_bounded_size(small):
    services, gql = small
    (author_token, author), [(reader_token, reader)] = await followed_author(gql)
    await first_page(gql, token=reader_token)
    created = [await create_post(gql, token=author_token, text=f"post {n}") for n in range(8)]
    await drain_fanout(services)
    cached = await cached_newsfeed(services, reader["id"])
    assert post_ids(cached) == list(reversed(raw(created)))[:5]
    assert len(cached) == 5
    await gql(USER_POSTS, {"u": author["username"]})
    assert await services.redis.zcard(author_feed(services.keys, decode_id(author["id"], "User"))) <= 4


async def test_follow_merges_recent_posts_and_unfollow_removes_them(small):
    services, gql = small
    reader_token, reader = await create_user(gql)
    old_token, old_friend = await create_user(gql)
    new_token, new_friend = await create_user(gql)
    await follow(gql, token=reader_token, user_id=old_friend["id"])
    with posting_days_ago(services, 0.2):
        new_friend_older = await create_post(gql, token=new_token, text="before the feed")
    kept = [await create_post(gql, token=old_token, text=f"old friend {n}") for n in range(6)]
    await first_page(gql, token=reader_token)  # a full feed: its five newest, floor at the fifth
    new_friend_recent = [await create_post(gql, token=new_token, text=f"new friend {n}") for n in range(2)]
    await follow(gql, token=reader_token, user_id=new_friend["id"])
    cached = post_ids(await cached_newsfeed(services, reader["id"]))
    # Merged: the new friend's posts above the feed's floor; the older one stays PostgreSQL's.
    assert cached == raw([*reversed(new_friend_recent), *reversed(kept[3:])])
    assert await newsfeed_ids(gql, token=reader_token, first=2) == [
        *reversed(new_friend_recent),
        *reversed(kept),
        new_friend_older,
    ]
    await gql.ok(UNFOLLOW, {"id": new_friend["id"]}, token=reader_token)
    assert post_ids(await cached_newsfeed(services, reader["id"])) == raw(list(reversed(kept[3:])))
    assert await newsfeed_ids(gql, token=reader_token, first=2) == list(reversed(kept))


async def test_deleted_posts_never_show(small):
    services, gql = small
    (author_token, _), [(reader_token, reader)] = await followed_author(gql)
    await first_page(gql, token=reader_token)
    keep = await create_post(gql, token=author_token, text="keep")
    gone = await create_post(gql, token=author_token, text="gone")
    await drain_fanout(services)
    assert post_ids(await cached_newsfeed(services, reader["id"])) == raw([gone, keep])
    await gql.ok(DELETE, {"id": gone}, token=author_token)
    assert await first_page(gql, token=reader_token) == [keep]  # before the deletion fanned out
    await drain_fanout(services)
    assert post_ids(await cached_newsfeed(services, reader["id"])) == raw([keep])
    assert await newsfeed_ids(gql, token=reader_token) == [keep]


async def test_celebrity_posts_skip_fanout_and_join_the_first_page(celebrities):
    services, gql = celebrities
    (star_token, star), [(reader_token, reader), _] = await followed_author(gql, followers=2)
    friend_token, friend = await create_user(gql)
    await follow(gql, token=reader_token, user_id=friend["id"])
    await first_page(gql, token=reader_token)
    star_post = await create_post(gql, token=star_token, text="to my many fans")
    friend_post = await create_post(gql, token=friend_token, text="to my friend")
    await drain_fanout(services)
    # The friend's post was pushed; the celebrity's was not.
    assert post_ids(await cached_newsfeed(services, reader["id"])) == raw([friend_post])
    await gql(USER_POSTS, {"u": star["username"]})  # the celebrity's own feed is cached
    assert await services.redis.exists(author_feed(services.keys, decode_id(star["id"], "User")))
    assert await first_page(gql, token=reader_token) == [friend_post, star_post]
    cached = await cached_newsfeed(services, reader["id"])
    assert post_ids(cached) == raw([friend_post, star_post])
    # A sparse feed: the merge widened to three days, and the feed vouches for no more.
    assert cached[-1].member == floor_marker(cached[-1].post_id)
    assert 2.9 < _age_in_days(cached[-1].post_id) < 3.1
    with posting_days_ago(services, 5):
        ancient = await create_post(gql, token=star_token, text="years ago")
    assert await newsfeed_ids(gql, token=reader_token, first=1) == [friend_post, star_post, ancient]


NEWSFEED_WITH_MEDIA = """
query { newsfeed(first: 20) { edges { node { id author { username followerCount } media { title } } } } }
"""


async def _feed_queries(gql, count_queries, token):
    count_queries.clear()
    edges = (await gql.ok(NEWSFEED_WITH_MEDIA, token=token))["newsfeed"]["edges"]
    return len(edges), len(count_queries)


async def test_a_feed_page_costs_the_same_queries_however_many_authors_it_shows(gql, http, services, count_queries):
    reader_token, _ = await create_user(gql)
    authors = [await create_user(gql) for _ in range(6)]
    for _, author in authors:
        await follow(gql, token=reader_token, user_id=author["id"])
    for token, _ in authors[:2]:
        media = await create_media(http, token=token)
        await create_post(gql, token=token, media_id=media["id"])
    await first_page(gql, token=reader_token)  # builds the cached feed
    few = await _feed_queries(gql, count_queries, reader_token)
    for token, _ in authors[2:]:
        media = await create_media(http, token=token)
        await create_post(gql, token=token, media_id=media["id"])
    await drain_fanout(services)
    many = await _feed_queries(gql, count_queries, reader_token)
    assert (few[0], many[0]) == (2, 6)
    # The viewer, the celebrities followed, the cached posts with their authors, older ones below
    # the cache's floor, the media, the counts: never one per post.
    assert few[1] == many[1] <= 6


async def test_a_thousand_followees_are_read_in_chunks_of_a_hundred(gql, services, settings, count_queries):
    reader_token, reader = await create_user(gql)
    reader_id = decode_id(reader["id"], "User")
    # Registering 1,050 users through the API would hash 1,050 passwords: rows go in directly.
    followees = [services.ids.next_id() for _ in range(1_050)]
    async with services.databases.main_session() as session:
        await session.execute(
            insert(User),
            [
                {
                    "id": user,
                    "username": f"bulk_{user}",
                    "nickname": "bulk",
                    "password_hash": "-",
                    "created_at": utcnow(),
                }
                for user in followees
            ],
        )
        await session.execute(
            insert(Follow),
            [
                {"id": services.ids.next_id(), "follower_id": reader_id, "followee_id": user, "created_at": utcnow()}
                for user in followees
            ],
        )
        await session.execute(
            insert(FollowCount), [{"user_id": reader_id, "follower_count": 0, "following_count": 1_050}]
        )
        await session.commit()
    posted = []
    for author in (followees[0], followees[555], followees[-1]):
        token = security.issue_token(settings, user_id=author, role="user", token_version=0)
        posted.append(await create_post(gql, token=token, text="one of many"))
    count_queries.clear()
    assert await first_page(gql, token=reader_token) == list(reversed(posted))
    followee_reads = [sql for sql in count_queries if "FROM follows" in sql and "follows.followee_id >" in sql]
    assert len(followee_reads) == 11  # ten chunks of 100, and the last 50
    assert post_ids(await cached_newsfeed(services, reader["id"])) == list(reversed(raw(posted)))


async def test_a_post_skipped_as_a_celebritys_reaches_feeds_after_the_author_drops_below_the_threshold(celebrities):
    services, gql = celebrities
    (star_token, star), [(reader_token, _), (fan_token, _)] = await followed_author(gql, followers=2)
    friend_token, friend = await create_user(gql)
    await follow(gql, token=reader_token, user_id=friend["id"])
    await first_page(gql, token=reader_token)  # the reader's feed is cached
    star_post = await create_post(gql, token=star_token, text="while famous")
    await drain_fanout(services)  # skipped: two followers make a celebrity here
    await gql.ok(UNFOLLOW, {"id": star["id"]}, token=fan_token)  # now an ordinary author
    friend_post = await create_post(gql, token=friend_token, text="meanwhile")
    await drain_fanout(services)
    assert await newsfeed_ids(gql, token=reader_token) == [friend_post, star_post]
    assert await newsfeed_ids(gql, token=reader_token, first=1) == [friend_post, star_post]
    with posting_days_ago(services, 5):
        # Older than any merge window: PostgreSQL serves it below the cache, once.
        ancient = await create_post(gql, token=star_token, text="long ago")
    await drain_fanout(services)
    assert await newsfeed_ids(gql, token=reader_token) == [friend_post, star_post, ancient]


async def test_a_post_fanned_out_as_an_ordinary_authors_stays_once_after_the_author_becomes_a_celebrity(celebrities):
    services, gql = celebrities
    (author_token, author), [(reader_token, reader)] = await followed_author(gql, followers=1)
    await first_page(gql, token=reader_token)
    post = await create_post(gql, token=author_token, text="before fame")
    await drain_fanout(services)
    assert post_ids(await cached_newsfeed(services, reader["id"])) == raw([post])
    fan_token, _ = await create_user(gql)
    await follow(gql, token=fan_token, user_id=author["id"])  # a celebrity from now on
    later = await create_post(gql, token=author_token, text="after fame")
    await drain_fanout(services)
    assert await newsfeed_ids(gql, token=reader_token) == [later, post]
    assert await newsfeed_ids(gql, token=reader_token, first=1) == [later, post]
    assert await newsfeed_ids(gql, token=fan_token) == [later, post]


async def test_a_post_whose_author_crossed_before_fanout_and_back_before_the_read_arrives_once(celebrities):
    services, gql = celebrities
    (author_token, author), [(reader_token, _)] = await followed_author(gql, followers=1)
    await first_page(gql, token=reader_token)
    post = await create_post(gql, token=author_token, text="crossing")  # posted as an ordinary author
    fan_token, _ = await create_user(gql)
    await follow(gql, token=fan_token, user_id=author["id"])
    await drain_fanout(services)  # a celebrity when the fan-out runs: skipped
    await gql.ok(UNFOLLOW, {"id": author["id"]}, token=fan_token)
    assert await newsfeed_ids(gql, token=reader_token) == [post]
    assert await first_page(gql, token=reader_token) == [post]
