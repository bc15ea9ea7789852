"""The news feed: posts of followed users, newest first, from `newsfeed:{user}` and PostgreSQL.

Hybrid fan-out, as the seed describes it: ordinary authors' posts are pushed into their
followers' cached feeds by the fan-out worker; a missing feed is built by fan-in from the
followees' recent posts; celebrities (not fanned out) are merged in on the first page from
their own cached feeds. Past the cache, pages come from PostgreSQL, so the feed never runs
dry before the followees' first post.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

from mediagraph.context import Context
from mediagraph.cursors import decode_id_cursor, encode_id_cursor
from mediagraph.dataloaders.feeds import PostByIdLoader
from mediagraph.dataloaders.users import UserByIdLoader
from mediagraph.db.base import utcnow
from mediagraph.db.feeds import (
    Post,
    follow_counts,
    followed_posts,
    followee_chunks,
    newer_followed_posts,
    older_followed_posts,
    recent_posts,
)
from mediagraph.db.users import User
from mediagraph.ids import snowflake_floor
from mediagraph.keys.feeds import COMPLETE, CacheState, Entry, FeedCache, author_feed, newsfeed
from mediagraph.resolvers.feeds.timelines import read_posts
from mediagraph.resolvers.pagination import Page, PageRequest, keyset_page
from mediagraph.subscriptions.feeds import newsfeed_posts

NEWSFEED_CURSOR = "newsfeed"
# The seed's scroll: ten posts at a time unless asked otherwise.
NEWSFEED_PAGE_SIZE = 10
# The seed's fan-in: one day of posts, widened a day at a time up to three while the
# feed holds 30 or fewer.
WINDOW_DAYS = (1, 2, 3)
SPARSE_FEED = 30


class Newsfeed:
    def __init__(self, context: Context, viewer_id: int) -> None:
        self.context = context
        self.settings = context.settings
        self.viewer_id = viewer_id
        self.cache = FeedCache(context.services.redis)
        self.key = newsfeed(context.services.keys, viewer_id)
        # A feed someone reads stays; the feeds of users who stopped coming expire.
        self.renew_ms = self.settings.newsfeed_ttl_seconds * 1000

    async def prepare(self, *, first_page: bool) -> bool:
        if not first_page:
            return True
        state = await self.cache.state(self.key)
        if state is CacheState.MISSING:
            # A fresh build read the celebrities' posts from PostgreSQL with everyone else's.
            return await self.build()
        if state is CacheState.BUILDING:
            return False
        await self._merge_celebrities()
        return True

    async def _followees(self, *, celebrities: bool = False) -> list[list[int]]:
        async with self.context.db.use() as session:
            if celebrities:
                # How many celebrities the viewer follows is unknown: the read finds out. Authors
                # whose fan-out skipped a post within the widest window are merged too, whatever
                # their count is now: fan-out decided for that post, and nobody else delivers it.
                threshold = self.settings.celebrity_followers
                skipped_since = snowflake_floor(utcnow() - timedelta(days=WINDOW_DAYS[-1]))
                chunks = followee_chunks(session, self.viewer_id, min_followers=threshold, skipped_since=skipped_since)
                return [chunk async for chunk in chunks]
            _, following = await follow_counts(session, self.viewer_id)
            return [chunk async for chunk in followee_chunks(session, self.viewer_id, following=following)]

    async def build(self) -> bool:
        """Fan-in: the followees' posts of the last day, widened while the feed stays sparse."""
        size = self.settings.newsfeed_size
        if not await self.cache.begin_build(self.key):
            return False
        # Read after the build is claimed: a post fanned out meanwhile lands in the claimed key.
        chunks = await self._followees()
        now, until, floor, found = utcnow(), None, COMPLETE, 0
        for days in WINDOW_DAYS:
            since = snowflake_floor(now - timedelta(days=days))
            rows: list[tuple[int, int]] = []
            async with self.context.db.use() as session:
                for chunk in chunks:
                    # Each chunk's newest `size` suffice: trimming keeps only the newest `size`.
                    rows += await recent_posts(session, chunk, since=since, until=until, limit=size)
            await self.cache.fill(self.key, [Entry(post_id, author_id) for post_id, author_id in rows])
            found, floor, until = found + len(rows), since, since
            if found > SPARSE_FEED:
                break
        ttl_ms = self.settings.newsfeed_ttl_seconds * 1000
        return await self.cache.finish_build(self.key, floor=floor, maxlen=size, ttl_ms=ttl_ms)

    async def _merge_celebrities(self) -> None:
        """Celebrities' recent posts, which fan-out skipped, merged in from their own feeds.

        Posts that were fanned out as well land once: a feed holds each post as one member.

        Afterwards the feed can only vouch for the window that was merged, so its floor is
        raised to the window's start; older pages come from PostgreSQL.
        """
        chunks = await self._followees(celebrities=True)
        if not chunks:
            return
        now = utcnow()
        for days in WINDOW_DAYS:
            since = snowflake_floor(now - timedelta(days=days))
            for chunk in chunks:
                await self.cache.add(
                    self.key, await self._celebrity_posts(chunk, since), maxlen=self.settings.newsfeed_size
                )
            if await self.cache.count_since(self.key, since) > SPARSE_FEED:
                break
        await self.cache.raise_floor(self.key, since)

    async def _celebrity_posts(self, celebrities: list[int], since: int) -> list[Entry]:
        keys = self.context.services.keys
        size = self.settings.author_feed_size
        windows = await self.cache.read_many(
            [author_feed(keys, author) for author in celebrities], since=since, count=size
        )
        entries: list[Entry] = []
        uncovered: list[int] = []
        for author, window in zip(celebrities, windows, strict=True):
            # The author's feed vouches for everything from its lowest entry upwards.
            reaches = window.lowest is not None and window.lowest.post_id <= since
            if window.state is CacheState.READY and reaches:
                entries += window.posts
            else:
                # No cached feed, or it does not reach back to `since`: ask PostgreSQL.
                uncovered.append(author)
        if uncovered:
            async with self.context.db.use() as session:
                rows = await recent_posts(session, uncovered, since=since, limit=self.settings.newsfeed_size)
            entries += [Entry(post_id, author_id) for post_id, author_id in rows]
        return entries

    async def visible(self, post_ids: list[int]) -> dict[int, Post]:
        if not post_ids:
            return {}
        async with self.context.db.use() as session:
            rows = await followed_posts(session, self.viewer_id, post_ids)
        return self.primed(rows)

    async def older(self, *, before: int | None, limit: int) -> list[Post]:
        async with self.context.db.use() as session:
            rows = await older_followed_posts(session, self.viewer_id, before=before, limit=limit)
        self.primed(rows)
        return [post for post, _ in rows]

    def primed(self, rows: list[tuple[Post, User]]) -> dict[int, Post]:
        posts, users = self.context.loader(PostByIdLoader), self.context.loader(UserByIdLoader)
        for post, author in rows:
            posts.prime(post.id, post)
            users.prime(author.id, author)
        return {post.id: post for post, _ in rows}


async def newsfeed_page(context: Context, *, request: PageRequest) -> Page[Post]:
    viewer = await context.require_viewer()
    secret = context.settings.secret_key
    argument = "before" if request.backward else "after"
    cursor_id = decode_id_cursor(secret, NEWSFEED_CURSOR, request.cursor, argument=argument)
    feed = Newsfeed(context, viewer.id)
    if request.backward:
        async with context.db.use() as session:
            rows = await newer_followed_posts(session, viewer.id, after=cursor_id or 0, limit=request.size + 1)
        feed.primed(rows)
        posts = [post for post, _ in rows]
    else:
        posts = await read_posts(feed, before=cursor_id, want=request.size + 1)
    return keyset_page(request, posts, lambda post: encode_id_cursor(secret, NEWSFEED_CURSOR, post.id))


async def newsfeed_updates(context: Context) -> AsyncIterator[Post]:
    """New posts as they land in the viewer's feed, celebrities' included."""
    viewer = await context.require_viewer()
    async for post in newsfeed_posts(context.services, viewer.id):
        yield post