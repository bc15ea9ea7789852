"""Media sorted by views or likes, paged with a session that reports what moved above the cursor.

Counts change while a client pages, so an item can jump from below the cursor to above it
and never be served. Each session remembers what it delivered and where its scan for
changes stands; the next page, in one snapshot, serves the unserved items below the
cursor and reports as `omitted` the unserved items now above it among those the sync
changed since. Its cost follows what changed, not how deep the client is.

The session is soft state: what it delivered lives in Redis (`keys/paging.py`), the rest
in its signed cursors, and a page never writes to PostgreSQL. The first page writes
nowhere: its cursors carry the ids it served, and the session is stored in Redis when
the client asks for the second page. A later page is one PostgreSQL statement (the page,
the omitted candidates and the generation) and one Redis script that filters out what
the session delivered and records what it delivers now, atomically; both are shared
with the other later pages of the same batch (`pages.later_page`, `run_batched`, `turns.py`).

Over-fetching: a page reads `PAGE_SLACK` more rows than it serves, since an item the
session delivered may have fallen below the cursor (likes are taken back). When more
than that were delivered already, it reads on below the last row it examined, twice as
many each time, for at most `PAGE_ROUNDS` statements in all; then it ends the page short
(`hasNextPage` stays true, and the end cursor goes on from what it examined).
"""

from __future__ import annotations

import base64
import hashlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import Enum
from typing import Any

import asyncpg
from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from mediagraph import validation
from mediagraph.context import Context
from mediagraph.cursors import decode_cursor, encode_cursor
from mediagraph.db.base import utcnow
from mediagraph.db.media import with_tags
from mediagraph.db.reads import LAST_ID
from mediagraph.db.rows import Where
from mediagraph.db.views import pages
from mediagraph.db.views.pages import RankedBy, ScanPoint
from mediagraph.errors import BadUserInput, CursorExpired, ServiceUnavailable
from mediagraph.ids import snowflake_time
from mediagraph.keys.paging import STEP_SCRIPT, Candidates, PageSessions, SessionGone
from mediagraph.keys.views import UNFLUSHED_SCRIPTS
from mediagraph.lua import run_batched
from mediagraph.resolvers.media import TagMatch
from mediagraph.resolvers.media.page_counts import counts_of, read_counts, unflushed_read
from mediagraph.resolvers.pagination import Page, page_size

# A first-page cursor carries the ids served so far; this bounds its length.
INLINE_LIMIT = 100
# Rows a page reads beyond what it serves, for delivered items that fell below the cursor.
PAGE_SLACK = 4
# Statements a page may run to find its items among rows the session delivered already.
PAGE_ROUNDS = 4
# Changed media above the cursor one page examines for `omitted`; the next page goes on.
OMITTED_SCAN = 10_000

EXPIRED = "This list's pagination session expired; start again without `after`."


class MediaSort(Enum):
    NEWEST = "NEWEST"
    VIEWS = "VIEWS"
    LIKES = "LIKES"


@dataclass(frozen=True)
class SessionCursor:
    session_id: int
    served: int  # items delivered up to and including this edge; later ones are forgotten on reuse
    generation: int  # with `scan_id`: changes up to this (generation, id) were looked at for `omitted`
    count: int  # the edge's sort value and id: where the next page starts
    media_id: int
    filter: str  # which list (tags) the session pages
    inline: tuple[int, ...] = ()  # first page only: its served ids, not stored yet
    scan_id: int = LAST_ID

    def encode(self, secret: str, sort: MediaSort) -> str:
        packed = base64.b64encode(struct.pack(f">{len(self.inline)}q", *self.inline)).decode() if self.inline else ""
        return encode_cursor(secret, _kind(sort), self._values(self.served, self.count, self.media_id, packed))

    def encode_edges(self, secret: str, sort: MediaSort, positions: Iterable[tuple[int, int]]) -> list[str]:
        """The cursors after a later page's edges: this one moved on by one item per edge, to
        each edge's (count, id); each is what `encode` would make of it, without a cursor built."""
        if self.inline:
            raise ValueError("a later page's cursors carry no served ids")
        kind = _kind(sort)
        return [
            encode_cursor(secret, kind, self._values(self.served + at, count, media_id, ""))
            for at, (count, media_id) in enumerate(positions, 1)
        ]

    def _values(self, served: int, count: int, media_id: int, packed: str) -> list[Any]:
        return [self.session_id, served, self.generation, count, media_id, self.filter, packed, self.scan_id]

    @classmethod
    def decode(cls, secret: str, sort: MediaSort, cursor: str) -> SessionCursor:
        values = decode_cursor(secret, _kind(sort), cursor)
        try:
            session_id, served, generation, count, media_id, list_filter, packed, scan_id = values
            raw = base64.b64decode(packed, validate=True)
            inline = struct.unpack(f">{len(raw) // 8}q", raw)
            numbers = (session_id, served, generation, count, media_id, scan_id)
            if not all(isinstance(n, int) for n in numbers) or not isinstance(list_filter, str):
                raise TypeError
        except (TypeError, ValueError, struct.error):
            raise BadUserInput("The cursor is invalid; start again without `after`.") from None
        return cls(session_id, served, generation, count, media_id, list_filter, inline, scan_id)

    @property
    def scan_after(self) -> ScanPoint:
        return (self.generation, self.scan_id)


def _kind(sort: MediaSort) -> str:
    return f"media:{sort.value.lower()}"


def filter_signature(tags: list[str] | None, tag_match: TagMatch) -> str:
    wanted = sorted(validation.tags(tags or []))
    return hashlib.sha256(f"{tag_match.value}:{','.join(wanted)}".encode()).hexdigest()[:12]


def page_sessions(context: Context) -> PageSessions:
    return PageSessions(
        context.services.redis, context.services.keys, ttl_seconds=context.settings.page_session_ttl_seconds
    )


async def ranked_media_list(
    context: Context,
    *,
    sort: MediaSort,
    tags: list[str] | None,
    tag_match: TagMatch,
    first: int | None,
    after: str | None,
    views: bool = False,
) -> Page[asyncpg.Record]:
    """`views`: the request shows view counts (read for the whole page at once)."""
    limit = page_size(first, min(context.settings.max_page_size, INLINE_LIMIT))
    where = with_tags(validation.tags(tags or []), all_of=tag_match is TagMatch.ALL)
    signature = filter_signature(tags, tag_match)
    by = RankedBy[sort.value]
    if after is None:
        return await _first_page(context, sort, by, where, signature, limit, views)
    cursor = SessionCursor.decode(context.settings.secret_key, sort, after)
    if cursor.filter != signature:
        raise BadUserInput("The cursor belongs to a list with other tags; start again without `after`.")
    ttl = timedelta(seconds=context.settings.page_session_ttl_seconds)
    if cursor.inline and snowflake_time(cursor.session_id) < utcnow() - ttl:
        raise CursorExpired(EXPIRED)
    return await _next_page(context, sort, by, where, cursor, limit, views)


def _position(by: RankedBy, row: asyncpg.Record) -> tuple[int, int]:
    return (row[by.value], row["id"])


async def _first_page(
    context: Context, sort: MediaSort, by: RankedBy, where: Where, signature: str, limit: int, views: bool
) -> Page[asyncpg.Record]:
    read = await pages.first_page(context.services.databases.main_reads, by, where, limit=limit + 1)
    session_id = context.services.ids.next_id()
    page = read.rows[:limit]
    secret = context.settings.secret_key
    items = []
    for at, row in enumerate(page):
        served = tuple(r["id"] for r in page[: at + 1])
        count, media_id = _position(by, row)
        cursor = SessionCursor(session_id, len(served), read.generation, count, media_id, signature, served)
        items.append((cursor.encode(secret, sort), row))
    counts = await read_counts(context, page, views=views)
    return Page(items=items, has_next_page=len(read.rows) > limit, counts=counts)


@dataclass
class _Found:
    """What one later page found: its rows in order, the omitted ids, and how its reading ended."""

    rows: list[asyncpg.Record]
    omitted: list[int]
    # Rows examined last (where an unfinished reading would go on), and whether it is unfinished.
    last_examined: tuple[int, int]
    unfinished: bool = False


async def _next_page(
    context: Context, sort: MediaSort, by: RankedBy, where: Where, cursor: SessionCursor, limit: int, views: bool
) -> Page[asyncpg.Record]:
    omitted_limit = context.settings.max_page_size
    reads = context.services.databases.main_reads
    sessions = page_sessions(context)
    key = sessions.delivered_key(cursor.session_id, sort.value, cursor.filter)
    position = (cursor.count, cursor.media_id)
    fetch = limit + 1 + PAGE_SLACK
    read = await pages.later_page(
        reads, by, where, position=position, scan_after=cursor.scan_after, limit=fetch, scan_limit=OMITTED_SCAN
    )
    assert read.omitted is not None
    step = sessions.step_of(
        key,
        rewind=cursor.served,
        next_number=cursor.served,
        inline=cursor.inline,
        lists=[
            Candidates(read.omitted.ids, want=omitted_limit + 1, record=omitted_limit),
            Candidates([row["id"] for row in read.rows], want=limit + 1, record=limit),
        ],
    )
    # The page's views not flushed yet travel in the same round trip as the step.
    unflushed = unflushed_read(context, read.rows) if views else None

    def queue(pipe: Pipeline) -> None:
        step.queue(pipe)
        if unflushed is not None:
            unflushed.queue(pipe)

    try:
        replies = await run_batched(context.services.redis, [STEP_SCRIPT, *UNFLUSHED_SCRIPTS], queue)
        omitted, page_ids = step.parse(replies[0])
        found = _Found(_pick(read.rows, page_ids), omitted, _last(by, read.rows, position))
        if len(page_ids) <= limit and len(read.rows) == fetch:
            await _read_on(context, sessions, key, by, where, found, cursor, limit, fetch)
    except SessionGone:
        raise CursorExpired(EXPIRED) from None
    except (RedisError, OSError):
        raise ServiceUnavailable("Pages by views or likes cannot be served right now; try again shortly.") from None

    cut_short = len(found.omitted) > omitted_limit
    omitted_ids = found.omitted[:omitted_limit]
    scan_cut = read.omitted.cut_at is not None
    # With the omitted list cut short, the next page looks again from the same point.
    generation, scan_id = cursor.scan_after if cut_short else read.omitted.resume_after(read.generation)
    page = found.rows
    base = replace(cursor, served=cursor.served + len(omitted_ids), generation=generation, scan_id=scan_id, inline=())
    secret = context.settings.secret_key
    shown = page[:limit]
    column = by.value
    cursors = base.encode_edges(secret, sort, [(row[column], row["id"]) for row in shown])
    items = list(zip(cursors, shown, strict=True))
    go_on = cut_short or scan_cut or found.unfinished
    continuation = None
    if go_on and not items:
        count, media_id = found.last_examined
        continuation = replace(base, count=count, media_id=media_id).encode(secret, sort)
    # Rows of the first read have their unflushed views from the batch's round trip.
    in_first_read = set(page_ids)
    unflushed_views = unflushed.parse(replies[1:]) if unflushed is not None else None
    counts = await counts_of(context, [row for row in shown if row["id"] in in_first_read], unflushed_views)
    counts |= await read_counts(context, [row for row in shown if row["id"] not in in_first_read], views=views)
    omitted_rows = await _omitted_rows(context, by, omitted_ids)
    counts |= await read_counts(context, omitted_rows, views=views)
    return Page(
        items=items,
        has_next_page=len(page) > limit or go_on,
        omitted=omitted_rows,
        continuation=continuation,
        counts=counts,
    )


async def _read_on(
    context: Context,
    sessions: PageSessions,
    key: str,
    by: RankedBy,
    where: Where,
    found: _Found,
    cursor: SessionCursor,
    limit: int,
    fetched: int,
) -> None:
    """Read on below the rows examined, while the session had delivered too many of them already."""
    reads = context.services.databases.main_reads
    delivered_before = cursor.served + min(len(found.omitted), context.settings.max_page_size)
    for _ in range(PAGE_ROUNDS - 1):
        fetched *= 2
        rows = await pages.rows_below(reads, by, where, position=found.last_examined, limit=fetched)
        recorded = min(len(found.rows), limit)
        (ids,) = await sessions.step(
            key,
            rewind=None,
            next_number=delivered_before + recorded,
            lists=[Candidates([row["id"] for row in rows], want=limit + 1 - len(found.rows), record=limit - recorded)],
        )
        found.rows += _pick(rows, ids)
        found.last_examined = _last(by, rows, found.last_examined)
        if len(found.rows) > limit or len(rows) < fetched:
            return
    found.unfinished = True


def _pick(rows: list[asyncpg.Record], ids: list[int]) -> list[asyncpg.Record]:
    wanted = set(ids)
    return [row for row in rows if row["id"] in wanted]


def _last(by: RankedBy, rows: list[asyncpg.Record], otherwise: tuple[int, int]) -> tuple[int, int]:
    return _position(by, rows[-1]) if rows else otherwise


async def _omitted_rows(context: Context, by: RankedBy, media_ids: list[int]) -> list[asyncpg.Record]:
    """The omitted media as they are now, highest first (one deleted since is left out)."""
    if not media_ids:
        return []
    rows = await pages.counted_by_ids(context.services.databases.main_reads, media_ids)
    return sorted(rows, key=lambda row: _position(by, row), reverse=True)
