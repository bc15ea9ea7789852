"""What a new post, a deletion, a follow or an unfollow owes the feed caches in Redis.

Each event is written to `feed_outbox` in the transaction of the change itself, applied
right after the commit, and its row deleted once Redis has it. When Redis cannot be
reached the row stays and the fan-out worker replays it (`relay`), so caches that outlive
an outage catch up instead of missing the change. Every effect is idempotent: a replay
that repeats one is harmless.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum

from redis.exceptions import RedisError
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from mediagraph.db.base import utcnow
from mediagraph.db.feeds import FeedEventKind, FeedOutbox, recent_posts
from mediagraph.keys.feeds import (
    ADD_SCRIPT,
    Entry,
    FeedCache,
    author_feed,
    fanout_stream,
    newsfeed,
    newsfeed_channel,
)
from mediagraph.lua import reload_if_lost
from mediagraph.pubsub.bus import wire_payload
from mediagraph.services import Services

log = logging.getLogger(__name__)

REDIS_ERRORS = (RedisError, OSError)
# Bounded so a stream nobody consumes cannot grow without limit.
STREAM_MAX_LENGTH = 1_000_000
Sessions = Callable[[], AbstractAsyncContextManager[AsyncSession]]
# Published on a user's news-feed channel when their follows change.
FOLLOWS_CHANGED = {"followsChanged": True}


class FanoutKind(Enum):
    POST = "post"
    DELETE = "delete"


@dataclass(frozen=True)
class FanoutMessage:
    kind: FanoutKind
    post_id: int
    author_id: int

    def fields(self) -> dict[str, str]:
        return {"kind": self.kind.value, "post_id": str(self.post_id), "author_id": str(self.author_id)}

    @classmethod
    def from_fields(cls, fields: dict[bytes, bytes]) -> FanoutMessage:
        return cls(FanoutKind(fields[b"kind"].decode()), int(fields[b"post_id"]), int(fields[b"author_id"]))


def record(
    session: AsyncSession, services: Services, kind: FeedEventKind, *, user_id: int, subject_id: int
) -> FeedOutbox:
    """Adds the event to the caller's transaction; `deliver` it after the commit."""
    event = FeedOutbox(id=services.ids.next_id(), kind=kind.value, user_id=user_id, subject_id=subject_id)
    session.add(event)
    return event


async def deliver(services: Services, event: FeedOutbox, *, sessions: Sessions) -> bool:
    """Applies a committed event now; if Redis is unreachable it stays for the relay.

    `sessions` opens the caller's database session (a request's own), so delivering
    does not take a second connection from the pool.
    """
    try:
        await apply(services, event, sessions=sessions)
    except REDIS_ERRORS as error:
        log.warning("feed event %s %s left for the relay: %s", event.kind, event.id, error)
        return False
    async with sessions() as session:
        await session.execute(delete(FeedOutbox).where(col(FeedOutbox.id) == event.id))
        await session.commit()
    return True


async def relay(services: Services, *, grace_seconds: float, limit: int = 100) -> int:
    """Replays events older than `grace_seconds` that were never delivered, oldest first.

    The grace period leaves a request that is still delivering its own event alone;
    SKIP LOCKED lets several workers relay at once without taking the same rows.
    """
    cutoff = utcnow() - timedelta(seconds=grace_seconds)
    async with services.databases.main_session() as session:
        events = (
            await session.execute(
                select(FeedOutbox)
                .where(col(FeedOutbox.created_at) <= cutoff)
                .order_by(col(FeedOutbox.id))
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
        ).scalars()
        done: list[int] = []
        try:
            for event in events:
                await apply(services, event, sessions=lambda: contextlib.nullcontext(session))
                done.append(event.id)
        finally:
            if done:
                await session.execute(delete(FeedOutbox).where(col(FeedOutbox.id).in_(done)))
            await session.commit()
    return len(done)


async def apply(services: Services, event: FeedOutbox, *, sessions: Sessions) -> None:
    kind = FeedEventKind(event.kind)
    if kind is FeedEventKind.POST_CREATED or kind is FeedEventKind.POST_DELETED:
        await _apply_post(services, event, created=kind is FeedEventKind.POST_CREATED)
    elif kind is FeedEventKind.FOLLOWED:
        await merge_followee(services, sessions, follower_id=event.user_id, followee_id=event.subject_id)
        await services.bus.publish(newsfeed_channel(services.keys, event.user_id), FOLLOWS_CHANGED)
    else:
        cache = FeedCache(services.redis)
        await cache.remove_author(newsfeed(services.keys, event.user_id), event.subject_id)
        await services.bus.publish(newsfeed_channel(services.keys, event.user_id), FOLLOWS_CHANGED)


async def _apply_post(services: Services, event: FeedOutbox, *, created: bool) -> None:
    settings = services.settings
    entry = Entry(event.subject_id, event.user_id)
    message = FanoutMessage(FanoutKind.POST if created else FanoutKind.DELETE, event.subject_id, event.user_id)
    key = author_feed(services.keys, event.user_id)
    cache = FeedCache(services.redis)
    renew_ms = settings.author_feed_ttl_seconds * 1000
    async with services.redis.pipeline(transaction=False) as pipe:
        if created:
            await cache.queue_add(pipe, key, [entry], maxlen=settings.author_feed_size, renew_ms=renew_ms)
        else:
            pipe.zrem(key, entry.member)
        pipe.xadd(fanout_stream(services.keys), message.fields(), maxlen=STREAM_MAX_LENGTH, approximate=True)  # type: ignore[arg-type]
        results = await pipe.execute(raise_on_error=False)
    if await reload_if_lost(services.redis, [ADD_SCRIPT], results):
        # Redis had lost the script (a restart): the add alone again, not the fan-out message.
        await cache.add(key, [entry], maxlen=settings.author_feed_size, renew_ms=renew_ms)
        results = results[1:]
    for result in results:
        if isinstance(result, Exception):
            raise result


async def merge_followee(services: Services, sessions: Sessions, *, follower_id: int, followee_id: int) -> int:
    """Puts the followee's newest posts into the follower's news feed, if it is cached.

    The newest `newsfeed_size` are enough: after trimming, the feed keeps only the newest
    that many of everything it holds, and none of the followee's older posts could rank.
    """
    key = newsfeed(services.keys, follower_id)
    if not await services.redis.exists(key):
        # A build starting after this reads the follow from PostgreSQL itself.
        return 0
    async with sessions() as session:
        rows = await recent_posts(session, [followee_id], limit=services.settings.newsfeed_size)
    entries = [Entry(post_id, author_id) for post_id, author_id in rows]
    return await FeedCache(services.redis).add(key, entries, maxlen=services.settings.newsfeed_size)


def fanout_payload(message: FanoutMessage) -> bytes:
    """What `newsfeedUpdated` subscribers receive for a post landing in their feed."""
    return wire_payload({"postId": message.post_id, "authorId": message.author_id}).encode()
