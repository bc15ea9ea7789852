"""Posts: writing and deleting them, and an author's posts from `feed:{author}` and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from mediagraph import validation
from mediagraph.context import Context
from mediagraph.cursors import decode_id_cursor, encode_id_cursor
from mediagraph.dataloaders.feeds import PostByIdLoader
from mediagraph.db.feeds import (
    POST_MAX_CHARACTERS,
    FeedEventKind,
    Post,
    newer_author_posts,
    older_author_posts,
    recent_posts,
)
from mediagraph.errors import Forbidden, NotFound
from mediagraph.ids import snowflake_time
from mediagraph.keys.feeds import COMPLETE, Entry, FeedCache, author_feed
from mediagraph.resolvers.feeds import events as feed_events
from mediagraph.resolvers.feeds.timelines import read_posts
from mediagraph.resolvers.media import require_media
from mediagraph.resolvers.pagination import Page, PageRequest, keyset_page

AUTHOR_CURSOR = "posts:author"


async def post_by_id(context: Context, post_id: int) -> Post | None:
    return await context.loader(PostByIdLoader).load(post_id)


async def create_post(context: Context, *, text: str, media_id: int | None) -> Post:
    viewer = await context.require_viewer()
    body = validation.post_text(text, max_length=POST_MAX_CHARACTERS)
    if media_id is not None:
        await require_media(context, media_id)
    services = context.services
    post_id = services.ids.next_id()
    post = Post(id=post_id, author_id=viewer.id, text=body, media_id=media_id, created_at=snowflake_time(post_id))
    async with context.db.use() as session:
        session.add(post)
        event = feed_events.record(session, services, FeedEventKind.POST_CREATED, user_id=viewer.id, subject_id=post_id)
        try:
            await session.commit()
        except IntegrityError:
            # The media was deleted between the check and the insert.
            raise NotFound("No such media.", argument="mediaId") from None
    context.loader(PostByIdLoader).prime(post_id, post)
    # The post is stored; if Redis is down the outbox relay fans it out later.
    await feed_events.deliver(services, event, sessions=context.db.use)
    return post


async def delete_post(context: Context, *, post_id: int) -> int:
    viewer = await context.require_viewer()
    post = await post_by_id(context, post_id)
    if post is None:
        raise NotFound("No such post.")
    if post.author_id != viewer.id:
        raise Forbidden("Only the author may delete this post.")
    async with context.db.use() as session:
        deleted = (
            await session.execute(delete(Post).where(col(Post.id) == post_id).returning(col(Post.id)))
        ).scalar_one_or_none()
        if deleted is None:
            raise NotFound("No such post.")
        event = feed_events.record(
            session, context.services, FeedEventKind.POST_DELETED, user_id=viewer.id, subject_id=post_id
        )
        await session.commit()
    context.loader(PostByIdLoader).clear(post_id)
    await feed_events.deliver(context.services, event, sessions=context.db.use)
    return post_id


class AuthorTimeline:
    """One author's posts: `feed:{author}` holds the newest, PostgreSQL the rest."""

    def __init__(self, context: Context, author_id: int) -> None:
        self.context = context
        self.author_id = author_id
        self.cache = FeedCache(context.services.redis)
        self.key = author_feed(context.services.keys, author_id)
        # The seed renews an author's feed on writes only.
        self.renew_ms = 0

    async def prepare(self, *, first_page: bool) -> bool:
        return True

    async def build(self) -> bool:
        settings = self.context.settings
        size = settings.author_feed_size
        if not await self.cache.begin_build(self.key):
            return False
        # Read after the build is claimed, so a post committed meanwhile is either read
        # here or lands in the claimed key through its own add.
        async with self.context.db.use() as session:
            rows = await recent_posts(session, [self.author_id], limit=size + 1)
        await self.cache.fill(self.key, [Entry(post_id, author_id) for post_id, author_id in rows[:size]])
        floor = COMPLETE if len(rows) <= size else rows[size - 1][0]
        ttl_ms = settings.author_feed_ttl_seconds * 1000
        return await self.cache.finish_build(self.key, floor=floor, maxlen=size, ttl_ms=ttl_ms)

    async def visible(self, post_ids: list[int]) -> dict[int, Post]:
        posts = await self.context.loader(PostByIdLoader).load_many(post_ids)
        return {post.id: post for post in posts if post is not None and post.author_id == self.author_id}

    async def older(self, *, before: int | None, limit: int) -> list[Post]:
        async with self.context.db.use() as session:
            posts = await older_author_posts(session, self.author_id, before=before, limit=limit)
        loader = self.context.loader(PostByIdLoader)
        for post in posts:
            loader.prime(post.id, post)
        return posts


async def author_posts(context: Context, *, author_id: int, request: PageRequest) -> Page[Post]:
    """An author's posts, newest first; backward pages come from PostgreSQL."""
    secret = context.settings.secret_key
    argument = "before" if request.backward else "after"
    cursor_id = decode_id_cursor(secret, AUTHOR_CURSOR, request.cursor, argument=argument)
    if request.backward:
        async with context.db.use() as session:
            posts = await newer_author_posts(session, author_id, after=cursor_id or 0, limit=request.size + 1)
        loader = context.loader(PostByIdLoader)
        for post in posts:
            loader.prime(post.id, post)
    else:
        posts = await read_posts(AuthorTimeline(context, author_id), before=cursor_id, want=request.size + 1)
    return keyset_page(request, posts, lambda post: encode_id_cursor(secret, AUTHOR_CURSOR, post.id))
