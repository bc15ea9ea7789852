"""Media as they change: new uploads, and which media's view, like or comment counts moved."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

from redis.asyncio.client import Pipeline

from mediagraph.db.media import Media
from mediagraph.keys.media import media_counts_channel, media_uploaded_channel
from mediagraph.keys.views import view_count_channel
from mediagraph.pubsub.bus import wire_payload
from mediagraph.services import Services

# Count notices are not queued anywhere: one lost while pub/sub reconnects would hold a
# count back until the next change. Every media is re-read this often, so never longer.
COUNTS_REFRESH_SECONDS = 30.0


async def uploads(services: Services, *, wanted_tags: set[str]) -> AsyncIterator[Media]:
    """Media uploaded from now on that carry one of `wanted_tags` (any media when empty)."""
    async with services.bus.subscribe(media_uploaded_channel(services.keys)) as events:
        async for event in events:
            # A subscription outlives any one operation: each event gets its own short session.
            async with services.databases.main_session() as session:
                media = await session.get(Media, event["id"])
            if media is not None and (not wanted_tags or wanted_tags.intersection(media.tags)):
                yield media


async def counts_changed(services: Services, media_id: int) -> None:
    """Tell whoever watches the media's counts that its likes or comments moved."""
    await services.bus.publish(media_counts_channel(services.keys, media_id), {"mediaId": media_id})


def queue_counts_changed(pipe: Pipeline, services: Services, media_id: int) -> None:
    """`counts_changed` queued on a caller's pipeline (the bus publishes on the same Redis)."""
    keys = services.keys
    keys.publish(pipe, media_counts_channel(keys, media_id), wire_payload({"mediaId": media_id}))


async def count_notices(services: Services, media_ids: list[int]) -> AsyncGenerator[set[int], None]:
    """Which of `media_ids` may have new counts: all of them at once, then those that moved.

    Views announce on their own channel (coalesced per push interval by the counting
    process), likes and comments on the media's counts channel. Notices are spaced by the
    view push interval, so a busy media costs a few reads a second however busy it is.
    """
    watched: dict[str, int] = {}
    for media_id in media_ids:
        watched[view_count_channel(services.keys, media_id, services.settings.view_buckets)] = media_id
        watched[media_counts_channel(services.keys, media_id)] = media_id
    notices = services.bus.notices(
        list(watched),
        min_interval=services.settings.view_push_interval_seconds,
        refresh_seconds=COUNTS_REFRESH_SECONDS,
    )
    async with notices as fired_channels:
        async for fired in fired_channels:
            yield {watched[channel] for channel in fired if channel in watched}
