"""New uploads as they happen, announced on the uploads channel."""

from __future__ import annotations

from collections.abc import AsyncIterator

from mediagraph.db.media import Media
from mediagraph.keys.media import media_uploaded_channel
from mediagraph.services import Services


async def uploads(services: Services, *, wanted_tags: set[str]) -> AsyncIterator[Media]:
    """Media uploaded from now on that carry one of `wanted_tags` (any media when empty)."""
    async with services.bus.subscribe(media_uploaded_channel(services.keys)) as events:
        async for event in events:
            # A subscription outlives any one operation: each event gets its own short session.
            async with services.databases.main_session() as session:
                media = await session.get(Media, event["id"])
            if media is not None and (not wanted_tags or wanted_tags.intersection(media.tags)):
                yield media
