"""The live news feed: a viewer's own channel plus the channels of the celebrities they follow.

Ordinary authors' posts reach a follower's channel from the fan-out worker as they land
in the feed. Celebrities are not fanned out, so their posts are published once on the
author's channel, and each viewer listens to the celebrities they follow. When the
viewer's follows change, their channel says so and the set of channels is recomputed.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

from mediagraph.db.feeds import Post, followed_posts, followee_chunks
from mediagraph.keys.feeds import author_posts_channel, newsfeed_channel
from mediagraph.services import Services

# Channels per subscription are bounded: past this many celebrities, the rest are not heard live.
MAX_CELEBRITY_CHANNELS = 1_000
# A post can arrive twice (a replayed outbox event); the last ids seen are skipped.
REMEMBERED_IDS = 512
INBOX_SIZE = 256


async def followed_celebrities(services: Services, viewer_id: int) -> set[int]:
    async with services.databases.main_session() as session:
        found: list[int] = []
        async for chunk in followee_chunks(session, viewer_id, min_followers=services.settings.celebrity_followers):
            found += chunk
            if len(found) >= MAX_CELEBRITY_CHANNELS:
                break
    return set(found[:MAX_CELEBRITY_CHANNELS])


class _Channels:
    """Pumps several bus subscriptions into one bounded inbox; the oldest events drop when full."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.inbox: asyncio.Queue[Any] = asyncio.Queue(maxsize=INBOX_SIZE)
        self.pumps: dict[str, asyncio.Task[None]] = {}

    def _put(self, item: Any) -> None:
        if self.inbox.full():
            self.inbox.get_nowait()
        self.inbox.put_nowait(item)

    async def _pump(self, channel: str, attached: asyncio.Event) -> None:
        try:
            async with self.services.bus.subscribe(channel) as events:
                attached.set()
                async for payload in events:
                    self._put(payload)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self._put(error)
        finally:
            attached.set()

    async def listen_to(self, channels: set[str]) -> None:
        """Returns once every new channel is subscribed, so what is published next is heard."""
        for channel in set(self.pumps) - channels:
            self.pumps.pop(channel).cancel()
        attaching: list[asyncio.Event] = []
        for channel in channels - set(self.pumps):
            attached = asyncio.Event()
            attaching.append(attached)
            self.pumps[channel] = asyncio.create_task(self._pump(channel, attached))
        for attached in attaching:
            await attached.wait()

    async def close(self) -> None:
        for task in self.pumps.values():
            task.cancel()
        if self.pumps:
            # Waits for each subscription to leave the bus; a cancelled caller still cancels.
            await asyncio.wait(self.pumps.values())


async def newsfeed_post_ids(services: Services, viewer_id: int) -> AsyncIterator[int]:
    """Ids of posts entering the viewer's feed, from now on."""
    own = newsfeed_channel(services.keys, viewer_id)
    channels = _Channels(services)

    async def resubscribe() -> None:
        celebrities = await followed_celebrities(services, viewer_id)
        await channels.listen_to({own, *(author_posts_channel(services.keys, author) for author in celebrities)})

    seen: OrderedDict[int, None] = OrderedDict()
    try:
        # The viewer's own channel first, then their follows: a follow committed after
        # the read below is announced on a channel already heard.
        await channels.listen_to({own})
        await resubscribe()
        while True:
            item = await channels.inbox.get()
            if isinstance(item, Exception):
                raise item
            if not isinstance(item, dict):
                continue
            if item.get("followsChanged"):
                await resubscribe()
                continue
            post_id = item.get("postId")
            if not isinstance(post_id, int) or post_id in seen:
                continue
            seen[post_id] = None
            if len(seen) > REMEMBERED_IDS:
                seen.popitem(last=False)
            yield post_id
    finally:
        await channels.close()


async def newsfeed_posts(services: Services, viewer_id: int) -> AsyncIterator[Post]:
    """Posts entering the viewer's feed, from now on, that the viewer may still see."""
    async for post_id in newsfeed_post_ids(services, viewer_id):
        # A subscription outlives any one operation: each event gets its own short session.
        async with services.databases.main_session() as session:
            rows = await followed_posts(session, viewer_id, [post_id])
        if rows:
            yield rows[0][0]
