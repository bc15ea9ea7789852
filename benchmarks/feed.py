"""`mediagraph bench feed`: the news feed's first page from the cache and from a cold rebuild,
and how long fan-out of one post to 10,000 followers takes.

One run, on fresh databases and a fresh Redis prefix:
- a reader follows `followees` authors whose posts spread over the last three days (rows
  written in bulk: the setup is not what is measured);
- first page (`newsfeed(first: 10)` over GraphQL, in process) with the reader's feed cached,
  and, interleaved with it, after deleting the cached feed so each request rebuilds it by
  fan-in from PostgreSQL; the ratio is the point;
- an author with `followers` followers, every one of them with a cached feed (the costly
  case: each gets the post), posts `posts` times; each post's fan-out is timed from the
  worker's read of the stream message to its acknowledgement. The celebrity threshold is
  raised above `followers` so the post is fanned out rather than skipped.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta

import httpx
from rich.progress import Progress
from sqlalchemy import insert

from benchmarks.harness import Latency, bench_settings, console, report
from mediagraph import security
from mediagraph.app import create_app
from mediagraph.db.base import utcnow
from mediagraph.db.feeds import Follow, FollowCount, Post
from mediagraph.db.users import User
from mediagraph.ids import SnowflakeGenerator, decode_id, snowflake_time
from mediagraph.keys.feeds import Entry, FeedCache, newsfeed
from mediagraph.services import Services
from mediagraph.settings import Settings
from mediagraph.workers import feeds as fanout

FIRST_PAGE = "query { newsfeed(first: 10) { edges { node { id text author { username } } } pageInfo { endCursor } } }"
CREATE_POST = 'mutation { createPost(text: "Hello, followers") { id } }'
BATCH = 1_000


def run(*, followers: int, followees: int, posts_per_followee: int, samples: int, posts: int) -> None:
    with bench_settings("feed", celebrity_followers=followers + 1) as settings:
        asyncio.run(_measure(settings, followers, followees, posts_per_followee, samples, posts))


@asynccontextmanager
async def _app(settings: Settings) -> AsyncIterator[tuple[Services, httpx.AsyncClient]]:
    application = create_app(settings)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as http:
            yield application.state.services, http


async def _measure(
    settings: Settings, followers: int, followees: int, posts_per_followee: int, samples: int, posts: int
) -> None:
    async with _app(settings) as (services, http):
        reader, authors = await _create_users(services, 1 + followees, "reader")
        await _follow(services, followers=[reader], followee_of=authors)
        await _backdated_posts(services, authors, posts_per_followee)
        popular, fans = await _create_users(services, 1 + followers, "fan")
        await _follow(services, followers=fans, followee_of=[popular])
        await _cache_feeds(services, fans)

        reader_headers = _auth(settings, reader)
        feed_key = newsfeed(services.keys, reader)
        cached, cold = [], []
        await _timed(lambda: _first_page(http, reader_headers))  # builds the feed once
        for _ in range(samples):
            cached.append(await _timed(lambda: _first_page(http, reader_headers)))
            await services.redis.delete(feed_key)
            cold.append(await _timed(lambda: _first_page(http, reader_headers)))
        fanouts = [await _fan_out_one(services, http, _auth(settings, popular), popular, fans) for _ in range(posts)]

    from_cache, rebuilt = Latency.of(cached), Latency.of(cold)
    spread = Latency.of(fanouts)
    report(
        f"News feed first page ({followees} followees, {followees * posts_per_followee:,} posts over 3 days)",
        ["path", "requests", "p50 ms", "p99 ms", "mean ms"],
        [
            ["from the cached feed", from_cache.count, from_cache.p50, from_cache.p99, from_cache.mean],
            ["cold: fan-in rebuild", rebuilt.count, rebuilt.p50, rebuilt.p99, rebuilt.mean],
        ],
    )
    report(
        f"Fan-out of one post to {followers:,} followers, each with a cached feed",
        ["posts", "p50 ms", "max ms", "per follower µs (p50)"],
        [[spread.count, spread.p50, max(fanouts) * 1000, spread.p50 * 1000 / followers]],
    )
    console.print(f"cold rebuild / cached first page (p50): [bold]{rebuilt.p50 / from_cache.p50:.1f}×[/]")


def _auth(settings: Settings, user_id: int) -> dict[str, str]:
    token = security.issue_token(settings, user_id=user_id, role="user", token_version=0)
    return {"authorization": f"Bearer {token}"}


async def _first_page(http: httpx.AsyncClient, headers: dict[str, str]) -> None:
    body = (await http.post("/graphql", json={"query": FIRST_PAGE}, headers=headers)).json()
    if body.get("errors") or len(body["data"]["newsfeed"]["edges"]) != 10:
        raise RuntimeError(f"unexpected first page: {body}")


async def _timed(call: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def _fan_out_one(
    services: Services, http: httpx.AsyncClient, headers: dict[str, str], author: int, fans: list[int]
) -> float:
    body = (await http.post("/graphql", json={"query": CREATE_POST}, headers=headers)).json()
    if body.get("errors"):
        raise RuntimeError(f"createPost failed: {body}")
    await fanout.ensure_group(services)
    started = time.perf_counter()
    delivered = await fanout.consume_once(services, "bench")
    elapsed = time.perf_counter() - started
    if delivered != 1:
        raise RuntimeError(f"expected one fan-out message, read {delivered}")
    # Every follower's feed must now hold the post, or the figure means nothing.
    member = Entry(decode_id(body["data"]["createPost"]["id"], "Post"), author).member
    async with services.redis.pipeline(transaction=False) as pipe:
        for fan in fans:
            pipe.zscore(newsfeed(services.keys, fan), member)
        missing = sum(score is None for score in await pipe.execute())
    if missing:
        raise RuntimeError(f"{missing} of {len(fans)} followers did not get the post")
    return elapsed


async def _create_users(services: Services, count: int, name: str) -> tuple[int, list[int]]:
    password_hash = security.hash_password("benchmark-password")
    ids = [services.ids.next_id() for _ in range(count)]
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"{name} users", total=count)
        for start in range(0, count, BATCH):
            rows = [
                {"id": user_id, "username": f"{name}_{user_id}", "nickname": name, "password_hash": password_hash}
                | {"role": "user", "created_at": utcnow(), "token_version": 0}
                for user_id in ids[start : start + BATCH]
            ]
            async with services.databases.main_session() as session:
                await session.execute(insert(User), rows)
                await session.commit()
            progress.advance(task, len(rows))
    return ids[0], ids[1:]


async def _follow(services: Services, *, followers: list[int], followee_of: list[int]) -> None:
    pairs = [(follower, followee) for follower in followers for followee in followee_of]
    async with services.databases.main_session() as session:
        for start in range(0, len(pairs), BATCH):
            chunk = pairs[start : start + BATCH]
            rows = [
                {"id": services.ids.next_id(), "follower_id": a, "followee_id": b, "created_at": utcnow()}
                for a, b in chunk
            ]
            await session.execute(insert(Follow), rows)
        counts: dict[int, list[int]] = {}
        for follower, followee in pairs:
            counts.setdefault(followee, [0, 0])[0] += 1
            counts.setdefault(follower, [0, 0])[1] += 1
        rows = [{"user_id": user, "follower_count": f, "following_count": g} for user, (f, g) in counts.items()]
        for start in range(0, len(rows), BATCH):
            await session.execute(insert(FollowCount), rows[start : start + BATCH])
        await session.commit()


async def _backdated_posts(services: Services, authors: list[int], per_author: int) -> None:
    rng = random.Random(11)
    now = time.time()
    three_days = timedelta(days=3).total_seconds()
    rows = []
    for node, author in enumerate(authors):
        moments = sorted(now - rng.uniform(0, three_days) for _ in range(per_author))
        ids = SnowflakeGenerator(node % 1024, clock=iter(moments).__next__)
        for _ in moments:
            post_id = ids.next_id()
            rows.append({"id": post_id, "author_id": author, "text": "x" * rng.randint(10, 300), "media_id": None})
    async with services.databases.main_session() as session:
        for start in range(0, len(rows), BATCH):
            chunk = [row | {"created_at": snowflake_time(int(str(row["id"])))} for row in rows[start : start + BATCH]]
            await session.execute(insert(Post), chunk)
        await session.commit()


async def _cache_feeds(services: Services, users: list[int]) -> None:
    """Every fan an (empty) cached feed, as if each had read theirs lately."""
    cache = FeedCache(services.redis)
    ttl_ms = services.settings.newsfeed_ttl_seconds * 1000
    size = services.settings.newsfeed_size
    at_once = asyncio.Semaphore(8)

    async def cache_one(user: int) -> None:
        key = newsfeed(services.keys, user)
        async with at_once:
            await cache.begin_build(key)
            await cache.finish_build(key, floor=0, maxlen=size, ttl_ms=ttl_ms)

    await asyncio.gather(*(cache_one(user) for user in users))
