"""Reading comments: a media's thread by cursor or by page number, and a user's comments across shards."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from mediagraph.context import Context
from mediagraph.cursors import decode_cursor, encode_cursor
from mediagraph.dataloaders.comments import ThreadWindowByMediaLoader
from mediagraph.db.comments import Comment
from mediagraph.db.comments import store as comment_store
from mediagraph.db.comments.paths import is_valid
from mediagraph.db.shards.residency import read_shard
from mediagraph.errors import BadUserInput
from mediagraph.ids import MAX_ID
from mediagraph.resolvers.pagination import Page, page_size

THREAD_CURSOR = "comments:thread"
WRITER_CURSOR = "comments:writer"
INVALID_CURSOR = "The cursor is invalid; start again without `after`."


@dataclass(frozen=True)
class NumberedPage:
    media_id: int
    page: int
    size: int
    comments: list[Comment]
    # The page buttons to show: the current block's pages that have comments.
    pages: list[int]
    has_previous_block: bool
    has_next_block: bool


def _cursor_values(context: Context, kind: str, cursor: str, owner_id: int) -> object:
    values = decode_cursor(context.settings.secret_key, kind, cursor)
    if len(values) != 2 or values[0] != owner_id:
        raise BadUserInput(INVALID_CURSOR, argument="after")
    return values[1]


async def thread(context: Context, *, media_id: int, first: int | None, after: str | None) -> Page[Comment]:
    """Thread order by keyset on the path: the same cost on the 10,000th page as on the first."""
    limit = page_size(first, context.settings.max_page_size)
    after_path = ""
    if after is not None:
        value = _cursor_values(context, THREAD_CURSOR, after, media_id)
        if not isinstance(value, str) or not is_valid(value):
            raise BadUserInput(INVALID_CURSOR, argument="after")
        after_path = value
    window = await context.loader(ThreadWindowByMediaLoader).load((media_id, limit + 1, after_path))
    secret = context.settings.secret_key
    return Page(
        items=[(encode_cursor(secret, THREAD_CURSOR, [media_id, row.path]), row) for row in window.comments[:limit]],
        has_next_page=len(window.comments) > limit,
    )


async def numbered_page(context: Context, *, media_id: int, page: int, size: int | None) -> NumberedPage:
    """A page by number, counting rows only as far as the current block of page buttons needs."""
    settings = context.settings
    if not 1 <= page <= settings.comment_max_page:
        raise BadUserInput(f"`page` must be between 1 and {settings.comment_max_page}.", argument="page")
    per_page = size if size is not None else page_size(None, settings.max_page_size)
    if not 1 <= per_page <= settings.max_page_size:
        raise BadUserInput(f"`size` must be between 1 and {settings.max_page_size}.", argument="size")
    block = settings.comment_page_block
    block_start = (page - 1) // block * block + 1
    block_end = block_start + block - 1

    async def work(session: AsyncSession) -> tuple[list[Comment], int]:
        rows = await comment_store.page_by_number(
            session, media_id=media_id, offset=(page - 1) * per_page, size=per_page
        )
        # One row past the block says whether a "next" button is needed.
        counted = await comment_store.limited_count(session, media_id=media_id, limit=block_end * per_page + 1)
        return rows, counted

    physical = context.services.databases.router.physical_shard(media_id)
    rows, counted = await read_shard(context.services, physical, work)
    last_page = min(block_end, -(-counted // per_page))
    return NumberedPage(
        media_id=media_id,
        page=page,
        size=per_page,
        comments=rows,
        pages=list(range(block_start, last_page + 1)),
        has_previous_block=block_start > 1,
        has_next_block=counted > block_end * per_page,
    )


async def writer_comments(context: Context, *, writer_id: int, first: int | None, after: str | None) -> Page[Comment]:
    """A writer's comments, newest first: every shard concurrently, at most a page from each."""
    limit = page_size(first, context.settings.max_page_size)
    before_id = MAX_ID
    if after is not None:
        value = _cursor_values(context, WRITER_CURSOR, after, writer_id)
        if not isinstance(value, int) or not 0 < value <= MAX_ID:
            raise BadUserInput(INVALID_CURSOR, argument="after")
        before_id = value
    services = context.services
    router = services.databases.router

    async def from_shard(physical: int) -> tuple[list[Comment], int | None]:
        async def work(session: AsyncSession) -> list[Comment]:
            return await comment_store.comments_by_writer(
                session, writer_id=writer_id, before_id=before_id, limit=limit + 1
            )

        rows = await read_shard(services, physical, work)
        # A full batch may hide older rows of this shard: nothing older than its last row is certain.
        frontier = rows[-1].id if len(rows) > limit else None
        # Rows of a logical shard that moved away are leftovers awaiting deletion.
        resident = [row for row in rows if router.physical_of_logical(row.logical_shard) == physical]
        return resident, frontier

    results = await asyncio.gather(
        *(from_shard(physical) for physical in range(len(services.databases.shards))), return_exceptions=True
    )
    fetched = _raise_first(results)
    frontier = max((edge for _, edge in fetched if edge is not None), default=None)
    merged = sorted(
        (row for rows, _ in fetched for row in rows if frontier is None or row.id >= frontier),
        key=lambda row: row.id,
        reverse=True,
    )
    secret = context.settings.secret_key
    return Page(
        items=[(encode_cursor(secret, WRITER_CURSOR, [writer_id, row.id]), row) for row in merged[:limit]],
        has_next_page=len(merged) > limit or frontier is not None,
    )


def _raise_first(
    results: Sequence[tuple[list[Comment], int | None] | BaseException],
) -> list[tuple[list[Comment], int | None]]:
    fetched: list[tuple[list[Comment], int | None]] = []
    for result in results:
        if isinstance(result, BaseException):
            raise result
        fetched.append(result)
    return fetched
