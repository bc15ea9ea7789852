"""The fan-out worker: as a real process, and its retry, dead-letter and claim steps."""

from __future__ import annotations

import asyncio

import pytest

from mediagraph.ids import decode_id
from mediagraph.keys.feeds import FANOUT_GROUP, FeedCache, fanout_dead_letters, fanout_stream, newsfeed
from mediagraph.resolvers.feeds.events import FanoutKind, FanoutMessage
from mediagraph.workers import feeds as fanout
from tests.support.apps import app_with, private_prefix
from tests.support.factories import create_post, create_user, follow, followed_author
from tests.support.feeds import cached_newsfeed, drain_fanout, first_page, post_ids, raw

WAIT_SECONDS = 90


async def _eventually(check, *, what: str):
    """Polls `check` (bounded) until it returns something truthy, and returns that."""
    for _ in range(WAIT_SECONDS * 10):
        result = await check()
        if result:
            return result
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def _pending(services) -> int:
    return int((await services.redis.xpending(fanout_stream(services.keys), FANOUT_GROUP))["pending"])


@pytest.fixture(scope="module")
async def worker_env(settings, live_servers):
    """A private prefix served by a real `mediagraph worker fanout` process; 4 followers make a celebrity."""
    prefix = private_prefix(settings, "worker")
    process = live_servers.spawn("worker", "fanout", MEDIAGRAPH_REDIS_PREFIX=prefix, MEDIAGRAPH_CELEBRITY_FOLLOWERS="4")
    async with app_with(settings, redis_prefix=prefix, celebrity_followers=4) as app:
        yield app
    process.terminate()
    process.wait(timeout=20)


async def test_worker_process_fans_out_to_ordinary_followers_with_feeds(worker_env):
    services, gql = worker_env
    (author_token, _), [*readers, (idle_token, idle)] = await followed_author(gql, followers=3)
    for token, _ in readers:
        await first_page(gql, token=token)
    post = await create_post(gql, token=author_token, text="to everyone with a feed")

    async def delivered():
        feeds = [await cached_newsfeed(services, reader["id"]) for _, reader in readers]
        return all(post_ids(feed) == raw([post]) for feed in feeds)

    await _eventually(delivered, what="the worker process to fan the post out")
    assert await cached_newsfeed(services, idle["id"]) is None
    for token, _ in (*readers, (idle_token, idle)):
        assert await first_page(gql, token=token) == [post]


async def test_worker_process_skips_celebrities(worker_env):
    services, gql = worker_env
    (star_token, _), [(reader_token, reader), *_] = await followed_author(gql, followers=4)
    friend_token, friend = await create_user(gql)
    await follow(gql, token=reader_token, user_id=friend["id"])
    await first_page(gql, token=reader_token)
    star_post = await create_post(gql, token=star_token, text="celebrity")
    friend_post = await create_post(gql, token=friend_token, text="friend")

    async def drained():
        info = await services.redis.xinfo_groups(fanout_stream(services.keys))
        last = (await services.redis.xinfo_stream(fanout_stream(services.keys)))["last-generated-id"]
        return info[0]["pending"] == 0 and info[0]["last-delivered-id"] == last

    await _eventually(drained, what="the worker process to drain the stream")
    assert post_ids(await cached_newsfeed(services, reader["id"])) == raw([friend_post])
    assert await first_page(gql, token=reader_token) == [friend_post, star_post]


async def test_messages_of_a_dead_consumer_are_claimed_by_a_worker_process(settings, live_servers):
    prefix = private_prefix(settings, "claim")
    async with app_with(settings, redis_prefix=prefix) as (services, gql):
        (author_token, _), [(reader_token, reader)] = await followed_author(gql)
        await first_page(gql, token=reader_token)
        await fanout.ensure_group(services)
        posts = [await create_post(gql, token=author_token, text=f"post {n}") for n in range(3)]
        # A consumer takes the messages and dies before acknowledging them.
        taken = await services.redis.xreadgroup(
            FANOUT_GROUP, "consumer-that-died", {fanout_stream(services.keys): ">"}, count=10
        )
        assert len(taken[0][1]) == 3
        assert await _pending(services) == 3
        process = live_servers.spawn(
            "worker", "fanout", MEDIAGRAPH_REDIS_PREFIX=prefix, MEDIAGRAPH_FANOUT_CLAIM_IDLE_MS="500"
        )
        try:

            async def claimed():
                return await _pending(services) == 0 and post_ids(await cached_newsfeed(services, reader["id"]))

            await _eventually(claimed, what="another consumer to claim the pending messages")
        finally:
            process.terminate()
            process.wait(timeout=20)
        assert post_ids(await cached_newsfeed(services, reader["id"])) == list(reversed(raw(posts)))
        assert await services.redis.xlen(fanout_dead_letters(services.keys)) == 0


@pytest.fixture(scope="module")
async def retrying(settings):
    """In-process steps, three attempts 10 ms apart."""
    overrides = {
        "redis_prefix": private_prefix(settings, "retry"),
        "fanout_max_attempts": 3,
        "fanout_retry_base_ms": 10,
    }
    async with app_with(settings, **overrides) as app:
        yield app


async def _author_with_readers(gql, count):
    """An author followed by `count` readers who each have a cached feed."""
    author, readers = await followed_author(gql, followers=count)
    for token, _ in readers:
        await first_page(gql, token=token)
    return author, readers


def _feed_key(services, user):
    return newsfeed(services.keys, decode_id(user["id"], "User"))


async def test_failed_deliveries_are_retried_for_the_followers_that_failed(retrying):
    services, gql = retrying
    (author_token, author), [(_, healthy), (_, broken)] = await _author_with_readers(gql, 2)
    # A feed key holding the wrong type makes the add script fail for that follower only.
    await services.redis.set(_feed_key(services, broken), "corrupted")
    post = await create_post(gql, token=author_token, text="retry me")
    message = FanoutMessage(FanoutKind.POST, decode_id(post, "Post"), decode_id(author["id"], "User"))
    retries = []

    async def repair(attempt, failure):
        retries.append((attempt, failure.followers))
        assert post_ids(await cached_newsfeed(services, healthy["id"])) == raw([post])
        cache = FeedCache(services.redis)
        await services.redis.delete(_feed_key(services, broken))
        await cache.begin_build(_feed_key(services, broken))
        await cache.finish_build(_feed_key(services, broken), floor=0, maxlen=5, ttl_ms=60_000)

    assert await fanout.deliver(services, message, on_retry=repair) is None
    assert retries == [(1, [decode_id(broken["id"], "User")])]
    assert post_ids(await cached_newsfeed(services, broken["id"])) == raw([post])


async def test_deliveries_that_keep_failing_end_in_the_dead_letter_stream(retrying):
    services, gql = retrying
    (author_token, _), [(_, healthy), (_, broken)] = await _author_with_readers(gql, 2)
    await services.redis.set(_feed_key(services, broken), "corrupted")
    await fanout.ensure_group(services)
    before = await services.redis.xlen(fanout_dead_letters(services.keys))
    post = await create_post(gql, token=author_token, text="dead letter")
    await drain_fanout(services)
    letters = await services.redis.xrange(fanout_dead_letters(services.keys))
    assert len(letters) == before + 1
    _, letter = letters[-1]
    assert letter[b"post_id"] == str(decode_id(post, "Post")).encode()
    assert letter[b"followers"] == str(decode_id(broken["id"], "User")).encode()
    assert letter[b"attempts"] == b"3"
    assert b"WRONGTYPE" in letter[b"error"]
    assert await _pending(services) == 0  # acknowledged: it will not be delivered again
    assert post_ids(await cached_newsfeed(services, healthy["id"])) == raw([post])


async def test_a_message_that_keeps_killing_its_consumers_is_dead_lettered(retrying):
    services, gql = retrying
    (author_token, _), [(_, reader)] = await _author_with_readers(gql, 1)
    await fanout.ensure_group(services)
    await drain_fanout(services)
    post = await create_post(gql, token=author_token, text="poison")
    taken = await services.redis.xreadgroup(FANOUT_GROUP, "doomed-1", {fanout_stream(services.keys): ">"}, count=1)
    message_id = taken[0][1][0][0]
    # Two more consumers claimed it and died too: it has been delivered three times.
    for consumer in ("doomed-2", "doomed-3"):
        await services.redis.xclaim(fanout_stream(services.keys), FANOUT_GROUP, consumer, 0, [message_id])
    assert await fanout.claim_stale(services, "survivor", min_idle_ms=0) == 1
    _, letter = (await services.redis.xrange(fanout_dead_letters(services.keys)))[-1]
    assert letter[b"post_id"] == str(decode_id(post, "Post")).encode()
    assert b"consumers keep dying" in letter[b"error"]
    assert await _pending(services) == 0
    assert post_ids(await cached_newsfeed(services, reader["id"])) == []


async def test_malformed_messages_are_dead_lettered(retrying):
    services, _ = retrying
    await fanout.ensure_group(services)
    await services.redis.xadd(fanout_stream(services.keys), {"kind": "post", "post_id": "not a number"})
    await drain_fanout(services)
    _, letter = (await services.redis.xrange(fanout_dead_letters(services.keys)))[-1]
    assert letter[b"error"].startswith(b"malformed message")
    assert await _pending(services) == 0
