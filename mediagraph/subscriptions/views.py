"""Live view counts: who announces a media's new count, and the `viewCount` stream itself."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from mediagraph.dataloaders.views import live_view_totals, view_buffer
from mediagraph.keys.views import view_count_channel
from mediagraph.pubsub.subscribers import subscriber_counts
from mediagraph.services import Services

log = logging.getLogger(__name__)

NUMSUB_CHUNK = 1_000

# Announcements run after the request that caused them has answered; held here so
# they are not collected before they finish.
_announcing: set[asyncio.Task[None]] = set()


def push_hold_ms(services: Services) -> int:
    """How long an announcer's claim on a media lasts if it dies without stepping down."""
    return max(5_000, int(services.settings.view_push_interval_seconds * 20_000))


async def announce(services: Services, media_ids: list[int]) -> None:
    """Publish the live count of those `media_ids` that someone, on any process, is subscribed to."""
    buckets = services.settings.view_buckets
    channels = {media_id: view_count_channel(services.keys, media_id, buckets) for media_id in media_ids}
    watched: list[int] = []
    ids = list(channels)
    for start in range(0, len(ids), NUMSUB_CHUNK):
        chunk = ids[start : start + NUMSUB_CHUNK]
        counts = await subscriber_counts(services.redis, services.keys, [channels[media_id] for media_id in chunk])
        watched += [media_id for media_id, subscribers in zip(chunk, counts, strict=True) if subscribers]
    if not watched:
        return
    totals = await live_view_totals(services, watched)
    for media_id in watched:
        await services.bus.publish(channels[media_id], {"mediaId": media_id, "viewCount": totals[media_id]})


async def announce_while_counting(services: Services, media_id: int) -> None:
    """Publish now, then once per push interval for as long as views keep arriving.

    Only one process at a time holds a media's `push` key (taken by the view that found
    it free); views counted meanwhile only bump it, so a hot media costs one announcement
    per interval in the whole deployment, and the last one always follows the last view.
    """
    buffer = view_buffer(services)
    interval = services.settings.view_push_interval_seconds
    hold = push_hold_ms(services)
    try:
        while True:
            await announce(services, [media_id])
            await asyncio.sleep(interval)
            if not await buffer.follow_up_push(media_id, push_hold_ms=hold):
                return
    except Exception:
        # Nobody awaits this task: say why it stopped. The claim expires by itself and the
        # next counted view (or the next flush) announces again.
        log.exception("view count announcement for media %s stopped", media_id)


def in_background(coroutine: Coroutine[Any, Any, None]) -> None:
    task = asyncio.get_running_loop().create_task(coroutine)
    _announcing.add(task)
    task.add_done_callback(_announcing.discard)


async def view_count_updates(services: Services, media_id: int) -> AsyncIterator[int]:
    """The current live count, then each new one: coalesced to the newest, one per push interval."""
    channel = view_count_channel(services.keys, media_id, services.settings.view_buckets)
    interval = services.settings.view_push_interval_seconds
    async with services.bus.subscribe(channel, keep=1, min_interval=interval) as events:
        # Subscribed before reading, so a change between the read and the first event is not lost.
        last = (await live_view_totals(services, [media_id]))[media_id]
        yield last
        async for event in events:
            count = int(event["viewCount"])
            if count != last:
                last = count
                yield count
