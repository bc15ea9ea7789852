"""`mediagraph worker fanout`: pushes new posts into the cached news feeds of their authors' followers.

Messages come from the fan-out stream through a consumer group, so any number of these
workers share the load. For a post, the followers are read in chunks and each gets the
post through the cache's exists-then-add script (no feed is created for a user who has
none) and a push on their live channel. Authors with `celebrity_followers` followers or
more are skipped: their followers merge their posts in on read, and hear of new ones on
the author's own channel.

Followers whose delivery failed are retried with exponential backoff; after
`fanout_max_attempts` the message goes to the dead-letter stream with the followers still
owed. A consumer that dies leaves its messages pending; after `fanout_claim_idle_ms`
another claims them (XAUTOCLAIM), and a message that keeps killing its consumers is
dead-lettered instead of being tried forever. The worker also relays feed events that
could not reach Redis when they happened (`feed_events.relay`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import ResponseError
from sqlalchemy.exc import SQLAlchemyError

from mediagraph.db.feeds import Post, follow_counts, follower_chunks, record_skipped_fanout
from mediagraph.keys.feeds import (
    ADD_SCRIPT,
    FANOUT_GROUP,
    Entry,
    FeedCache,
    author_posts_channel,
    fanout_dead_letters,
    fanout_stream,
    newsfeed,
    newsfeed_channel,
)
from mediagraph.lua import reload_if_lost
from mediagraph.observability.metrics import Lag
from mediagraph.pubsub.streams import group_backlog
from mediagraph.resolvers.feeds import events as feed_events
from mediagraph.resolvers.feeds.events import REDIS_ERRORS, FanoutKind, FanoutMessage, fanout_payload
from mediagraph.services import Services

log = logging.getLogger(__name__)

NAME = "fanout"

FOLLOWER_CHUNK = 1_000
READ_COUNT = 16
BLOCK_MS = 1_000
MAX_RETRY_DELAY_SECONDS = 5.0
DEAD_LETTER_MAX_LENGTH = 100_000
# Followers listed in a dead letter; the count is always given in full.
DEAD_LETTER_FOLLOWERS = 1_000
RELAY_INTERVAL_SECONDS = 2.0
# Leaves a request that is still delivering its own event alone.
RELAY_GRACE_SECONDS = 5.0
WORKER_ERRORS = (*REDIS_ERRORS, SQLAlchemyError)

RetryHook = Callable[[int, "Failure"], Awaitable[None]]


@dataclass
class Failure:
    """What is still owed after an attempt: `followers` None means the whole message."""

    error: str
    followers: list[int] | None = field(default=None)


def consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


async def ensure_group(services: Services) -> None:
    try:
        # From the stream's start: posts queued before any worker ran still get delivered.
        await services.redis.xgroup_create(fanout_stream(services.keys), FANOUT_GROUP, id="0", mkstream=True)
    except ResponseError as error:
        if "BUSYGROUP" not in str(error):
            raise


async def _push(services: Services, message: FanoutMessage, followers: list[int]) -> Failure | None:
    cache = FeedCache(services.redis)
    entry = Entry(message.post_id, message.author_id)
    payload = fanout_payload(message)
    per_follower = 2 if message.kind is FanoutKind.POST else 1
    async with services.redis.pipeline(transaction=False) as pipe:
        for follower in followers:
            key = newsfeed(services.keys, follower)
            if message.kind is FanoutKind.POST:
                await cache.queue_add(pipe, key, [entry], maxlen=services.settings.newsfeed_size)
                services.keys.publish(pipe, newsfeed_channel(services.keys, follower), payload)
            else:
                cache.queue_discard(pipe, key, entry)
        results = await pipe.execute(raise_on_error=False)
    # Followers whose add met a Redis that lost the script fail below and are retried; with it loaded.
    await reload_if_lost(services.redis, [ADD_SCRIPT], results)
    failed = [
        follower
        for index, follower in enumerate(followers)
        if any(isinstance(result, Exception) for result in results[index * per_follower : (index + 1) * per_follower])
    ]
    if not failed:
        return None
    first_error = next(result for result in results if isinstance(result, Exception))
    return Failure(error=f"{type(first_error).__name__}: {first_error}", followers=failed)


async def _attempt(services: Services, message: FanoutMessage, owed: list[int] | None) -> Failure | None:
    settings = services.settings
    async with services.databases.main_session() as session:
        if message.kind is FanoutKind.POST and await session.get(Post, message.post_id) is None:
            return None  # deleted before it was fanned out
        followers_count, _ = await follow_counts(session, message.author_id)
        if followers_count >= settings.celebrity_followers:
            # A celebrity's posts enter feeds only by the merge on read: a new one is recorded
            # as skipped (so readers merge it even if the author drops below the threshold
            # before they read) and announced on the author's channel; a deleted one is
            # skipped and pruned by the reads meeting it.
            if message.kind is FanoutKind.POST:
                await record_skipped_fanout(session, author_id=message.author_id, post_id=message.post_id)
                await session.commit()
                channel = author_posts_channel(services.keys, message.author_id)
                await services.keys.publish(services.redis, channel, fanout_payload(message))
            return None
        if owed is not None:
            return await _push(services, message, owed)
        failures = [
            failure
            async for chunk in follower_chunks(session, message.author_id, size=FOLLOWER_CHUNK)
            if (failure := await _push(services, message, chunk)) is not None
        ]
    if not failures:
        return None
    return Failure(error=failures[0].error, followers=[f for failure in failures for f in failure.followers or []])


async def deliver(services: Services, message: FanoutMessage, *, on_retry: RetryHook | None = None) -> Failure | None:
    """Delivers one message, retrying what failed; returns what is still owed after the last try."""
    settings = services.settings
    owed: list[int] | None = None
    failure: Failure | None = None
    for attempt in range(1, settings.fanout_max_attempts + 1):
        try:
            failure = await _attempt(services, message, owed)
        except WORKER_ERRORS as error:
            failure = Failure(error=f"{type(error).__name__}: {error}", followers=owed)
        if failure is None:
            return None
        owed = failure.followers
        if attempt < settings.fanout_max_attempts:
            delay = min(settings.fanout_retry_base_ms / 1000 * 2 ** (attempt - 1), MAX_RETRY_DELAY_SECONDS)
            log.warning(
                "fan-out of post %s failed (attempt %s), retrying in %.2fs: %s",
                message.post_id,
                attempt,
                delay,
                failure.error,
            )
            await asyncio.sleep(delay)
            if on_retry is not None:
                await on_retry(attempt, failure)
    return failure


async def _settle(
    services: Services, message_id: bytes, fields: dict[bytes, bytes], failure: Failure | None, attempts: int
) -> None:
    """Acknowledges a message, dead-lettering it first if it could not be delivered."""
    stream = fanout_stream(services.keys)
    async with services.redis.pipeline(transaction=True) as pipe:
        if failure is not None:
            owed = failure.followers
            letter = {
                **fields,
                b"message_id": message_id,
                b"error": failure.error[:1000].encode(),
                b"attempts": str(attempts).encode(),
                b"followers": b"all" if owed is None else ",".join(map(str, owed[:DEAD_LETTER_FOLLOWERS])).encode(),
                b"followers_owed": b"all" if owed is None else str(len(owed)).encode(),
            }
            pipe.xadd(fanout_dead_letters(services.keys), letter, maxlen=DEAD_LETTER_MAX_LENGTH, approximate=True)  # type: ignore[arg-type]
            log.error("fan-out of message %s dead-lettered: %s", message_id, failure.error)
        pipe.xack(stream, FANOUT_GROUP, message_id)
        await pipe.execute()


async def handle(services: Services, message_id: bytes, fields: dict[bytes, bytes] | None) -> None:
    if not fields:
        # Trimmed from the stream while it was pending: nothing left to deliver.
        await services.redis.xack(fanout_stream(services.keys), FANOUT_GROUP, message_id)
        return
    try:
        message = FanoutMessage.from_fields(fields)
    except (KeyError, ValueError) as error:
        await _settle(services, message_id, fields, Failure(error=f"malformed message: {error!r}"), 0)
        return
    failure = await deliver(services, message)
    await _settle(services, message_id, fields, failure, services.settings.fanout_max_attempts)


async def consume_once(services: Services, consumer: str, *, block_ms: int | None = None) -> int:
    """Reads and delivers new messages; returns how many. `block_ms=None` does not wait."""
    reply: Any = await services.redis.xreadgroup(
        FANOUT_GROUP, consumer, {fanout_stream(services.keys): ">"}, count=READ_COUNT, block=block_ms
    )
    messages = [item for _, items in reply or [] for item in items]
    await asyncio.gather(*(handle(services, message_id, fields) for message_id, fields in messages))
    return len(messages)


async def claim_stale(services: Services, consumer: str, *, min_idle_ms: int) -> int:
    """Takes over messages another consumer left pending for `min_idle_ms`; returns how many."""
    stream = fanout_stream(services.keys)
    start: bytes | str = "0-0"
    claimed_total = 0
    while True:
        reply: Any = await services.redis.xautoclaim(
            stream, FANOUT_GROUP, consumer, min_idle_ms, start_id=start, count=READ_COUNT
        )
        start, claimed = reply[0], reply[1]
        if claimed:
            claimed_total += len(claimed)
            deliveries = await _delivery_counts(services, [message_id for message_id, _ in claimed])
            await asyncio.gather(
                *(
                    _handle_claimed(services, message_id, fields, deliveries.get(message_id, 1))
                    for message_id, fields in claimed
                )
            )
        if start in (b"0-0", "0-0"):
            return claimed_total


async def _delivery_counts(services: Services, message_ids: list[bytes]) -> dict[bytes, int]:
    stream = fanout_stream(services.keys)
    async with services.redis.pipeline(transaction=False) as pipe:
        for message_id in message_ids:
            pipe.xpending_range(stream, FANOUT_GROUP, min=message_id, max=message_id, count=1)
        replies: list[Any] = await pipe.execute()
    return {entry["message_id"]: int(entry["times_delivered"]) for reply in replies for entry in reply}


async def _handle_claimed(
    services: Services, message_id: bytes, fields: dict[bytes, bytes] | None, deliveries: int
) -> None:
    if fields and deliveries > services.settings.fanout_max_attempts:
        failure = Failure(error=f"delivered {deliveries} times without being acknowledged; its consumers keep dying")
        await _settle(services, message_id, fields, failure, deliveries)
        return
    await handle(services, message_id, fields)


async def lag(services: Services) -> list[Lag]:
    """Fan-out messages not yet delivered (waiting or pending), and those given up on (dead letters)."""
    backlog = await group_backlog(services.redis, fanout_stream(services.keys), FANOUT_GROUP)
    dead = await services.redis.xlen(fanout_dead_letters(services.keys))
    return [
        Lag(NAME, "stream", entries=backlog.entries, seconds=backlog.oldest_seconds),
        Lag(NAME, "dead_letters", entries=int(dead)),
    ]


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def _relay_forever(services: Services, stop: asyncio.Event) -> None:
    while not stop.is_set():
        relayed = 0
        try:
            relayed = await feed_events.relay(services, grace_seconds=RELAY_GRACE_SECONDS)
        except WORKER_ERRORS as error:
            log.warning("feed outbox relay failed, will retry: %s", error)
        if relayed == 0:
            await _wait(stop, RELAY_INTERVAL_SECONDS)


async def run(services: Services, stop: asyncio.Event) -> None:
    consumer = consumer_name()
    claim_every = min(5.0, services.settings.fanout_claim_idle_ms / 2000)
    relay = asyncio.create_task(_relay_forever(services, stop), name="fanout:relay")
    loop = asyncio.get_running_loop()
    next_claim, backoff, group_ready = 0.0, 0.1, False
    log.info("fan-out worker %s consuming %s", consumer, fanout_stream(services.keys))
    try:
        while not stop.is_set():
            try:
                if not group_ready:
                    await ensure_group(services)
                    group_ready = True
                if loop.time() >= next_claim:
                    await claim_stale(services, consumer, min_idle_ms=services.settings.fanout_claim_idle_ms)
                    next_claim = loop.time() + claim_every
                await consume_once(services, consumer, block_ms=BLOCK_MS)
                backoff = 0.1
            except ResponseError as error:
                # NOGROUP: Redis came back empty; the group is created again.
                group_ready = False
                log.warning("fan-out stream error: %s", error)
                await _wait(stop, backoff)
            except WORKER_ERRORS as error:
                log.warning("fan-out worker cannot reach its stores, retrying: %s", error)
                await _wait(stop, backoff)
                backoff = min(backoff * 2, MAX_RETRY_DELAY_SECONDS)
    finally:
        relay.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await relay
