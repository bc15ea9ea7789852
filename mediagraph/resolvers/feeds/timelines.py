"""Paging a cached feed, and carrying on in PostgreSQL exactly where the cache's coverage ends.

A ready feed holds every post of its timeline from its floor upwards (see `keys.feeds`),
so a page takes entries from Redis down to the floor and the rest from PostgreSQL strictly
below it: no post is served twice and none is skipped at the seam. Entries whose post is
gone (deleted, or its author no longer followed) are skipped and pruned from the cache.
When Redis cannot answer, the page comes from PostgreSQL alone.
"""

from __future__ import annotations

import logging
from typing import Protocol

from mediagraph.db.feeds import Post
from mediagraph.keys.feeds import COMPLETE, CacheState, Entry, FeedCache
from mediagraph.resolvers.feeds.events import REDIS_ERRORS

log = logging.getLogger(__name__)

# Extra entries read per round trip, so a few pruned ones rarely cost another.
SLACK = 4


class Timeline(Protocol):
    cache: FeedCache
    key: str
    renew_ms: int

    async def prepare(self, *, first_page: bool) -> bool:
        """Gets the cache ready for a page; False sends the whole page to PostgreSQL."""
        ...

    async def build(self) -> bool:
        """Builds a missing cache from PostgreSQL; False if someone else is building it."""
        ...

    async def visible(self, post_ids: list[int]) -> dict[int, Post]: ...

    async def older(self, *, before: int | None, limit: int) -> list[Post]:
        """The timeline from PostgreSQL: posts below `before`, newest first."""
        ...


async def read_posts(timeline: Timeline, *, before: int | None, want: int) -> list[Post]:
    """Up to `want` posts of the timeline below `before`, newest first."""
    posts: list[Post] = []
    boundary = before
    try:
        if await timeline.prepare(first_page=before is None):
            boundary = await _from_cache(timeline, posts, before=before, want=want)
    except REDIS_ERRORS as error:
        log.warning("feed cache %s unavailable, reading PostgreSQL: %s", timeline.key, error)
        boundary = posts[-1].id if posts else before
    if len(posts) < want and boundary != COMPLETE:
        posts += await timeline.older(before=boundary, limit=want - len(posts))
    return posts


async def _from_cache(timeline: Timeline, posts: list[Post], *, before: int | None, want: int) -> int | None:
    """Fills `posts` from the cache; returns the bound below which PostgreSQL must continue."""
    cursor = before
    built = False
    while len(posts) < want:
        count = want - len(posts) + SLACK
        window = await timeline.cache.read(timeline.key, before=cursor, count=count, renew_ms=timeline.renew_ms)
        if window.state is CacheState.MISSING and not built:
            built = await timeline.build()
            if built:
                continue
        if window.state is not CacheState.READY:
            return cursor
        found = await timeline.visible([entry.post_id for entry in window.posts])
        gone: list[Entry] = []
        for entry in window.posts:
            post = found.get(entry.post_id)
            if post is None:
                gone.append(entry)
                continue
            posts.append(post)
            if len(posts) == want:
                break
        await timeline.cache.discard(timeline.key, gone)
        if len(posts) == want:
            break
        if window.floor is not None:
            return window.floor
        if len(window.posts) < count:
            # Ran out of entries: the lowest one is where the coverage ends.
            return window.posts[-1].post_id if window.posts else cursor
        cursor = window.posts[-1].post_id
    return posts[-1].id
