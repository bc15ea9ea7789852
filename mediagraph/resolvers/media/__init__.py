"""Media: upload, edit, delete, lookups, tag search, bookmarks."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from enum import Enum
from typing import Any

import asyncpg
from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlmodel import col
from starlette.datastructures import UploadFile

from mediagraph import validation
from mediagraph.context import Context
from mediagraph.cursors import decode_cursor, encode_cursor
from mediagraph.dataloaders.media import MediaByIdLoader
from mediagraph.db.base import utcnow
from mediagraph.db.comments import store as comment_store
from mediagraph.db.media import Bookmark, Media, newer_media, owned_by, with_tags
from mediagraph.db.rows import Where
from mediagraph.db.views.pages import COUNTED_MEDIA
from mediagraph.errors import BadUserInput, Forbidden, NotFound, ServiceUnavailable
from mediagraph.keys.media import media_uploaded_channel
from mediagraph.resolvers.media.page_counts import read_counts
from mediagraph.resolvers.pagination import Page, PageRequest, keyset_page
from mediagraph.storage.sniff import ALLOWED_TYPES, HEAD_BYTES, content_matches
from mediagraph.subscriptions.media import uploads

log = logging.getLogger(__name__)



class TagMatch(Enum):
    ALL = "ALL"
    ANY = "ANY"


def _cursor(context: Context, kind: str, value: int) -> str:
    return encode_cursor(context.settings.secret_key, kind, [value])


def _after(context: Context, kind: str, after: str | None) -> int | None:
    if after is None:
        return None
    values = decode_cursor(context.settings.secret_key, kind, after)
    if len(values) != 1 or not isinstance(values[0], int):
        raise BadUserInput("The cursor is invalid; start again without `after`.")
    return values[0]


async def media_by_id(context: Context, media_id: int) -> Media | None:
    return await context.loader(MediaByIdLoader).load(media_id)


async def media_record_by_id(context: Context, media_id: int) -> Mapping[str, Any] | None:
    """`media(id:)`'s row as read, for a field that builds its object straight from it: a hot
    row, else one read merged with other requests' (`db/reads.py`), no model instance built."""
    return (await context.loader(MediaByIdLoader).records([media_id])).get(media_id)


async def require_media(context: Context, media_id: int) -> Media:
    media = await media_by_id(context, media_id)
    if media is None:
        raise NotFound("No such media.")
    return media


async def _newest_page(
    context: Context, where: Where, *, request: PageRequest, kind: str, views: bool
) -> Page[asyncpg.Record]:
    cursor_id = _after(context, kind, request.cursor)
    reads = context.services.databases.main_reads
    if request.backward:
        # Rarely asked (a client scrolling back up): a plain statement, not merged with others,
        # and the counts load on their own.
        records = await reads.fetch(newer_media(where), cursor_id or 0, request.size + 1, *where.args)
    else:
        records = await reads.fetch_newest_page(COUNTED_MEDIA, where, before=cursor_id, limit=request.size + 1)
    page = keyset_page(request, records, lambda row: _cursor(context, kind, row["id"]))
    if not request.backward:
        page.counts = await read_counts(context, records[: request.size], views=views)
    return page


def tag_filter(tags: list[str] | None, tag_match: TagMatch) -> list[Any]:
    """The WHERE conditions selecting media that carry ALL or ANY of `tags` (none when no tags)."""
    wanted = validation.tags(tags or [])
    if not wanted:
        return []
    column = Media.__table__.c.tags  # type: ignore[attr-defined]
    return [column.contains(wanted) if tag_match is TagMatch.ALL else column.overlap(wanted)]


async def media_list(
    context: Context, *, tags: list[str] | None, tag_match: TagMatch, request: PageRequest, views: bool = False
) -> Page[asyncpg.Record]:
    """Newest first; `views`: the request shows view counts (read for the whole page at once)."""
    where = with_tags(validation.tags(tags or []), all_of=tag_match is TagMatch.ALL)
    return await _newest_page(context, where, request=request, kind="media:newest", views=views)


async def media_by_owner(
    context: Context, *, owner_id: int, request: PageRequest, views: bool = False
) -> Page[asyncpg.Record]:
    return await _newest_page(context, owned_by(owner_id), request=request, kind="media:owner", views=views)


async def upload_media(
    context: Context, *, file: UploadFile, title: str, description: str | None, tags: list[str] | None
) -> Media:
    viewer = await context.require_viewer()
    clean_title = validation.title(title)
    clean_description = validation.description(description or "")
    clean_tags = validation.tags(tags or [])
    declared = (file.content_type or "").split(";")[0].strip().lower()
    if declared not in ALLOWED_TYPES:
        raise BadUserInput(
            f"Content type {declared or 'missing'!r} is not accepted; upload images, audio or video.",
            argument="file",
        )
    size = file.size if file.size is not None else 0
    if size > context.settings.max_upload_bytes:
        raise BadUserInput(f"The file is larger than {context.settings.max_upload_bytes} bytes.", argument="file")
    await file.seek(0)
    head = await file.read(HEAD_BYTES)
    if not head:
        raise BadUserInput("The file is empty.", argument="file")
    if not content_matches(declared, head):
        raise BadUserInput("The file's content does not match its declared type.", argument="file")
    await file.seek(0)

    media_id = context.services.ids.next_id()
    storage_key = f"{media_id % 256:02x}/{media_id}"
    stored_size = await context.services.storage.save(storage_key, file.file)
    media = Media(
        id=media_id,
        owner_id=viewer.id,
        title=clean_title,
        description=clean_description,
        tags=clean_tags,
        content_type=declared,
        filename=validation.clean_text(
            (file.filename or "upload").rsplit("/", 1)[-1], argument="filename", max_length=255
        ),
        size_bytes=stored_size,
        storage_key=storage_key,
    )
    try:
        async with context.db.use() as session:
            session.add(media)
            await session.commit()
    except BaseException:
        # The row never landed: do not leave an orphan file behind.
        await context.services.storage.delete(storage_key)
        raise
    await context.services.bus.publish(media_uploaded_channel(context.services.keys), {"id": media.id})
    return media


async def _owned_media(context: Context, media_id: int) -> Media:
    viewer = await context.require_viewer()
    media = await require_media(context, media_id)
    if media.owner_id != viewer.id:
        raise Forbidden("Only the uploader may change this media.")
    return media


async def update_media(
    context: Context,
    *,
    media_id: int,
    title: str | None,
    description: str | None,
    tags: list[str] | None,
) -> Media:
    media = await _owned_media(context, media_id)
    changes: dict[str, Any] = {}
    if title is not None:
        changes["title"] = validation.title(title)
    if description is not None:
        changes["description"] = validation.description(description)
    if tags is not None:
        changes["tags"] = validation.tags(tags)
    async with context.db.use() as session:
        media = await session.merge(media)
        for field, value in changes.items():
            setattr(media, field, value)
        media.updated_at = utcnow()
        await session.commit()
    loader = context.loader(MediaByIdLoader)
    loader.clear(media_id)
    loader.prime(media_id, media)
    return media


async def delete_media(context: Context, *, media_id: int) -> int:
    media = await _owned_media(context, media_id)
    async with context.db.use() as session:
        await session.execute(delete(Media).where(col(Media.id) == media_id))
        await session.commit()
    context.loader(MediaByIdLoader).clear(media_id)
    with contextlib.suppress(OSError):
        await context.services.storage.delete(media.storage_key)
    try:
        await comment_store.purge_media_comments(context.services, media_id=media_id)
    except ServiceUnavailable:
        # The media is gone either way; its orphaned comments are unreachable through it.
        log.warning("comments of deleted media %s stay until their shard is back", media_id)
    return media_id


async def bookmark(context: Context, *, media_id: int) -> Media:
    viewer = await context.require_viewer()
    media = await require_media(context, media_id)
    async with context.db.use() as session:
        # Bookmarking twice is a no-op, not an error.
        await session.execute(
            insert(Bookmark)
            .values(id=context.services.ids.next_id(), user_id=viewer.id, media_id=media_id, created_at=utcnow())
            .on_conflict_do_nothing(index_elements=["user_id", "media_id"])
        )
        await session.commit()
    return media


async def unbookmark(context: Context, *, media_id: int) -> Media:
    viewer = await context.require_viewer()
    media = await require_media(context, media_id)
    async with context.db.use() as session:
        await session.execute(
            delete(Bookmark).where(col(Bookmark.user_id) == viewer.id, col(Bookmark.media_id) == media_id)
        )
        await session.commit()
    return media


async def bookmarks(context: Context, *, user_id: int, request: PageRequest) -> Page[Media]:
    viewer = await context.require_viewer()
    if viewer.id != user_id:
        raise Forbidden("Bookmarks are private.")
    cursor_id = _after(context, "bookmarks", request.cursor)
    query = (
        select(col(Bookmark.id), Media)
        .join(Media, col(Media.id) == col(Bookmark.media_id))
        .where(col(Bookmark.user_id) == user_id)
    )
    if request.backward:
        query = query.where(col(Bookmark.id) > (cursor_id or 0)).order_by(col(Bookmark.id))
    else:
        if cursor_id is not None:
            query = query.where(col(Bookmark.id) < cursor_id)
        query = query.order_by(col(Bookmark.id).desc())
    async with context.db.use() as session:
        rows = [(bookmark_id, media) for bookmark_id, media in await session.execute(query.limit(request.size + 1))]
    page = keyset_page(request, rows, lambda row: _cursor(context, "bookmarks", row[0]))
    return page.map(lambda row: row[1])


async def content_response(context: Context, *, media_id: int, request: Any) -> Any:
    media = await require_media(context, media_id)
    return await context.services.storage.download_response(
        media.storage_key, request=request, media_type=media.content_type, filename=media.filename
    )


async def uploaded_media(context: Context, *, tags: list[str] | None) -> AsyncIterator[Media]:
    wanted = set(validation.tags(tags or []))
    async for media in uploads(context.services, wanted_tags=wanted):
        yield media