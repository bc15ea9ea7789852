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
from mediagraph.resolvers.pagination import Page, PageRequest, keyset_page, page_size

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


def _cursor_values(context: Context, kind: str, cursor: str, owner_id: int, argument: str) -> object:
    values = decode_cursor(context.settings.secret_key, kind, cursor)
    if len(values) != 2 or values[0] != owner_id:
        raise BadUserInput(INVALID_CURSOR, argument=argument)
    return values[1]


def _cursor_argument(request: PageRequest) -> str:
    return "before" if request.backward else "after"


async def thread(context: Context, *, media_id: int, request: PageRequest) -> Page[Comment]:
    """Thread order by keyset on the path: the same cost on the 10,000th page as on the first, both ways."""
    cursor_path: str | None = None
    if request.cursor is not None:
        value = _cursor_values(context, THREAD_CURSOR, request.cursor, media_id, _cursor_argument(request))
        if not isinstance(value, str) or not is_valid(value):
            raise BadUserInput(INVALID_CURSOR, argument=_cursor_argument(request))
        cursor_path = value
    if request.backward:

        async def work(session: AsyncSession) -> list[Comment]:
            return await comment_store.thread_before(
                session, media_id=media_id, before_path=cursor_path, limit=request.size + 1
            )

        physical = context.services.databases.router.physical_shard(media_id)
        rows = await read_shard(context.services, physical, work)
    else:
        window = await context.loader(ThreadWindowByMediaLoader).load((media_id, request.size + 1, cursor_path or ""))
        rows = window.comments
    secret = context.settings.secret_key
    return keyset_page(request, rows, lambda row: encode_cursor(secret, THREAD_CURSOR, [media_id, row.path]))


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


async def writer_comments(context: Context, *, writer_id: int, request: PageRequest) -> Page[Comment]:
    """A writer's comments, newest first: every shard concurrently, at most a page from each."""
    cursor_id: int | None = None
    if request.cursor is not None:
        value = _cursor_values(context, WRITER_CURSOR, request.cursor, writer_id, _cursor_argument(request))
        if not isinstance(value, int) or not 0 < value <= MAX_ID:
            raise BadUserInput(INVALID_CURSOR, argument=_cursor_argument(request))
        cursor_id = value
    limit = request.size
    services = context.services
    router = services.databases.router

    async def from_shard(physical: int) -> tuple[list[Comment], int | None]:
        async def work(session: AsyncSession) -> list[Comment]:
            if request.backward:
                return await comment_store.comments_by_writer_after(
                    session, writer_id=writer_id, after_id=cursor_id or 0, limit=limit + 1
                )
            return await comment_store.comments_by_writer(
                session, writer_id=writer_id, before_id=cursor_id or MAX_ID, limit=limit + 1
            )

        rows = await read_shard(services, physical, work)
        # A full batch may hide more rows of this shard beyond its last: nothing past it is certain.
        frontier = rows[-1].id if len(rows) > limit else None
        # Rows of a logical shard that moved away are leftovers awaiting deletion.
        resident = [row for row in rows if router.physical_of_logical(row.logical_shard) == physical]
        return resident, frontier

    results = await asyncio.gather(
        *(from_shard(physical) for physical in range(len(services.databases.shards))), return_exceptions=True
    )
    fetched = _raise_first(results)
    # Rows read away from the cursor, nearest first, up to the nearest frontier of any shard.
    frontiers = [edge for _, edge in fetched if edge is not None]
    rows = [row for found, _ in fetched for row in found]
    if request.backward:
        frontier = min(frontiers, default=None)
        merged = sorted((row for row in rows if frontier is None or row.id <= frontier), key=lambda row: row.id)
    else:
        frontier = max(frontiers, default=None)
        merged = sorted(
            (row for row in rows if frontier is None or row.id >= frontier), key=lambda row: row.id, reverse=True
        )
    secret = context.settings.secret_key
    page = keyset_page(
        request, merged, lambda row: encode_cursor(secret, WRITER_CURSOR, [writer_id, row.id])
    )
    if frontier is not None:
        # Some shard holds more beyond what this page could compare: paging on is not over.
        if request.backward:
            page.has_previous_page = True
        else:
            page.has_next_page = True
    return page


def _raise_first(
    results: Sequence[tuple[list[Comment], int | None] | BaseException],
) -> list[tuple[list[Comment], int | None]]:
    fetched: list[tuple[list[Comment], int | None]] = []
    for result in results:
        if isinstance(result, BaseException):
            raise result
        fetched.append(result)
    return fetched
