"""Media sorted by views or likes, paged with a session that reports what moved above the cursor.

Counts change while a client pages, so an item can jump from below the cursor to above it
and never be served. Each session remembers what it delivered (`media_page_session_items`)
and the sync generation its last page saw; the next page, in one snapshot, serves the
unserved items below the cursor and reports as `omitted` the unserved items now above it
among those the sync changed since that generation. Its cost follows what changed, not how
deep the client is. The first page writes nothing: its cursors carry the ids it served,
and the session is stored when the client asks for the second page.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import Enum
from typing import Any

from sqlalchemy import BigInteger, delete, exists, literal, select, tuple_, union_all, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased
from sqlmodel import col

from mediagraph import validation
from mediagraph.context import Context
from mediagraph.cursors import decode_cursor, encode_cursor
from mediagraph.dataloaders.media import MediaByIdLoader
from mediagraph.db.base import utcnow
from mediagraph.db.media import Media
from mediagraph.db.views import MediaPageSession, MediaPageSessionItem, MediaSortGeneration, store
from mediagraph.errors import BadUserInput, CursorExpired
from mediagraph.ids import snowflake_time
from mediagraph.resolvers.media import TagMatch, tag_filter
from mediagraph.resolvers.pagination import Page, page_size

# A first-page cursor carries the ids served so far; this bounds its length.
INLINE_LIMIT = 100

Item = MediaPageSessionItem

class MediaSort(Enum):
    NEWEST = "NEWEST"
    VIEWS = "VIEWS"
    LIKES = "LIKES"


@dataclass(frozen=True)
class SessionCursor:
    session_id: int
    served: int  # items delivered up to and including this edge; later ones are forgotten on reuse
    generation: int  # the sync generation the page was read at
    count: int  # the edge's sort value and id: where the next page starts
    media_id: int
    filter: str  # which list (tags) the session pages
    inline: tuple[int, ...] = ()  # first page only: its served ids, not stored yet

    def encode(self, secret: str, sort: MediaSort) -> str:
        packed = base64.b64encode(struct.pack(f">{len(self.inline)}q", *self.inline)).decode()
        values = [self.session_id, self.served, self.generation, self.count, self.media_id, self.filter, packed]
        return encode_cursor(secret, _kind(sort), values)

    @classmethod
    def decode(cls, secret: str, sort: MediaSort, cursor: str) -> SessionCursor:
        values = decode_cursor(secret, _kind(sort), cursor)
        try:
            session_id, served, generation, count, media_id, list_filter, packed = values
            raw = base64.b64decode(packed, validate=True)
            inline = struct.unpack(f">{len(raw) // 8}q", raw)
            numbers = (session_id, served, generation, count, media_id)
            if not all(isinstance(n, int) for n in numbers) or not isinstance(list_filter, str):
                raise TypeError
        except (TypeError, ValueError, struct.error):
            raise BadUserInput("The cursor is invalid; start again without `after`.") from None
        return cls(session_id, served, generation, count, media_id, list_filter, inline)


def _kind(sort: MediaSort) -> str:
    return f"media:{sort.value.lower()}"


def filter_signature(tags: list[str] | None, tag_match: TagMatch) -> str:
    wanted = sorted(validation.tags(tags or []))
    return hashlib.sha256(f"{tag_match.value}:{','.join(wanted)}".encode()).hexdigest()[:12]


def _sort_column(sort: MediaSort) -> Any:
    return col(Media.view_count) if sort is MediaSort.VIEWS else col(Media.like_count)


def _ranked(sort: MediaSort, part: str, conditions: list[Any], limit: int) -> Any:
    key = _sort_column(sort)
    generation = select(col(MediaSortGeneration.generation)).where(col(MediaSortGeneration.id) == 1)
    return (
        select(Media, literal(part).label("part"), generation.scalar_subquery().label("generation"))
        .where(*conditions)
        .order_by(key.desc(), col(Media.id).desc())
        .limit(limit)
        # A media this operation loaded earlier must show the counts read now.
        .execution_options(populate_existing=True)
    )


def _position(sort: MediaSort, media: Media) -> tuple[int, int]:
    return (media.view_count if sort is MediaSort.VIEWS else media.like_count, media.id)


async def ranked_media_list(
    context: Context,
    *,
    sort: MediaSort,
    tags: list[str] | None,
    tag_match: TagMatch,
    first: int | None,
    after: str | None,
) -> Page[Media]:
    limit = page_size(first, min(context.settings.max_page_size, INLINE_LIMIT))
    conditions = tag_filter(tags, tag_match)
    signature = filter_signature(tags, tag_match)
    if after is None:
        return await _first_page(context, sort, conditions, signature, limit)
    cursor = SessionCursor.decode(context.settings.secret_key, sort, after)
    if cursor.filter != signature:
        raise BadUserInput("The cursor belongs to a list with other tags; start again without `after`.")
    ttl = timedelta(seconds=context.settings.page_session_ttl_seconds)
    if cursor.inline and snowflake_time(cursor.session_id) < utcnow() - ttl:
        raise CursorExpired("This list's pagination session expired; start again without `after`.")
    return await _next_page(context, sort, conditions, cursor, limit)


async def _first_page(
    context: Context, sort: MediaSort, conditions: list[Any], signature: str, limit: int
) -> Page[Media]:
    async with context.db.use() as session:
        rows = (await session.execute(_ranked(sort, "page", conditions, limit + 1))).all()
    _prime(context, [row[0] for row in rows])
    session_id = context.services.ids.next_id()
    page = [row[0] for row in rows[:limit]]
    items = []
    for at, media in enumerate(page):
        served = tuple(m.id for m in page[: at + 1])
        count, media_id = _position(sort, media)
        cursor = SessionCursor(session_id, len(served), rows[0][2], count, media_id, signature, served)
        items.append((cursor.encode(context.settings.secret_key, sort), media))
    return Page(items=items, has_next_page=len(rows) > limit)


async def _next_page(
    context: Context, sort: MediaSort, conditions: list[Any], cursor: SessionCursor, limit: int
) -> Page[Media]:
    omitted_limit = context.settings.max_page_size
    both = union_all(
        next_page_query(sort, cursor, conditions, limit + 1), omitted_query(sort, cursor, conditions, omitted_limit + 1)
    ).subquery()
    read = select(aliased(Media, both), both.c.part, both.c.generation).execution_options(populate_existing=True)

    async with context.db.use() as session:
        # Taking the session row first serialises requests of one session; the read
        # that follows is one statement, so the page, the omitted items and the
        # generation all come from one snapshot.
        await _resume_session(session, context, sort, cursor)
        rows = (await session.execute(read)).all()
        by_position = sorted(rows, key=lambda row: _position(sort, row[0]), reverse=True)
        page = [row[0] for row in by_position if row[1] == "page"]
        omitted = [row[0] for row in by_position if row[1] == "omitted"]
        cut_short = len(omitted) > omitted_limit
        omitted = omitted[:omitted_limit]
        delivered = omitted + page[:limit]
        await store.record_delivered(session, cursor.session_id, cursor.served, [media.id for media in delivered])
        await session.commit()
    _prime(context, delivered)

    # With the omitted list cut short, the next page looks again from the same generation.
    generation = cursor.generation if cut_short or not rows else rows[0][2]
    base = replace(cursor, served=cursor.served + len(omitted), generation=generation, inline=())
    items = []
    for index, media in enumerate(page[:limit]):
        count, media_id = _position(sort, media)
        edge = replace(base, served=base.served + index + 1, count=count, media_id=media_id)
        items.append((edge.encode(context.settings.secret_key, sort), media))
    return Page(
        items=items,
        has_next_page=len(page) > limit or cut_short,
        omitted=omitted,
        continuation=base.encode(context.settings.secret_key, sort) if cut_short and not items else None,
    )


def _around(sort: MediaSort, cursor: SessionCursor) -> tuple[Any, Any, Any]:
    """The row key, the cursor's key, and "not yet served in this session"."""
    key = tuple_(_sort_column(sort), col(Media.id))
    cursor_key = tuple_(literal(cursor.count, BigInteger), literal(cursor.media_id, BigInteger))
    unserved = ~exists().where(col(Item.session_id) == cursor.session_id, col(Item.media_id) == col(Media.id))
    return key, cursor_key, unserved


def next_page_query(sort: MediaSort, cursor: SessionCursor, conditions: list[Any], limit: int) -> Any:
    key, cursor_key, unserved = _around(sort, cursor)
    return _ranked(sort, "page", [key < cursor_key, unserved, *conditions], limit)


def omitted_query(sort: MediaSort, cursor: SessionCursor, conditions: list[Any], limit: int) -> Any:
    """Unserved media above the cursor, looked for only among those the sync changed since the cursor's page."""
    key, cursor_key, unserved = _around(sort, cursor)
    changed = col(Media.sort_generation) > literal(cursor.generation, BigInteger)
    return _ranked(sort, "omitted", [changed, key > cursor_key, unserved, *conditions], limit)


async def _resume_session(session: AsyncSession, context: Context, sort: MediaSort, cursor: SessionCursor) -> None:
    """Lock the session (storing it if the first page's cursor carries it) and forget what followed the cursor."""
    # Sessions are soft state: their writes need not wait for the WAL to reach the disk.
    await store.without_waiting_for_disk(session)
    now = utcnow()
    session_id = cursor.session_id
    if cursor.inline:
        await session.execute(
            insert(MediaPageSession)
            .values(id=session_id, sort=sort.value, created_at=snowflake_time(session_id), last_used_at=now)
            .on_conflict_do_update(index_elements=["id"], set_={"last_used_at": now})
        )
        await store.record_delivered(session, session_id, 0, list(cursor.inline))
    else:
        ttl = timedelta(seconds=context.settings.page_session_ttl_seconds)
        touched = await session.execute(
            update(MediaPageSession)
            .where(col(MediaPageSession.id) == session_id, col(MediaPageSession.last_used_at) > now - ttl)
            .values(last_used_at=now)
            .returning(col(MediaPageSession.id))
        )
        if touched.first() is None:
            raise CursorExpired("This list's pagination session expired; start again without `after`.")
    # Reusing an earlier cursor (a retry, or going back) rewinds the session to it.
    await session.execute(delete(Item).where(col(Item.session_id) == session_id, col(Item.seq) >= cursor.served))


def _prime(context: Context, rows: list[Media]) -> None:
    loader = context.loader(MediaByIdLoader)
    for media in rows:
        loader.prime(media.id, media)
