"""The statements of view- and like-sorted media pages, on the asyncpg read path.

Every page row carries its counts (`COUNTED_MEDIA`): the flushed views and the exact likes.

A page is read in one statement, one snapshot: the sync generation, the page's rows
below the cursor and (after the first page) the ids of media above the cursor that
the sync changed since the cursor's generation, the candidates for `omitted`. Which of
them the session already delivered is Redis's to say (`keys/paging.py`); PostgreSQL
holds no session state, so a page never writes.

Later pages of the same list and size asked at about the same moment (one batch,
`turns.py`), by any sessions and at any depths, are read together, in one statement over
their positions (`LaterPages`, as `db/reads.py` merges newest pages): a round trip and a
parse per batch, not per page. First pages of one list asked in one batch are one read
(`SameRead`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Any

import asyncpg

from mediagraph.db.media import Media
from mediagraph.db.reads import LAST_ID, ReadPool, SameRead, SlottedPages
from mediagraph.db.rows import Where


class RankedBy(Enum):
    """The sort column of a ranked list (synced from the counters, indexed with the id)."""

    VIEWS = "view_count"
    LIKES = "like_count"


MEDIA_COLUMNS = ", ".join(f'm."{column.name}"' for column in Media.__table__.columns)  # type: ignore[attr-defined]
GENERATION = "SELECT generation FROM media_sort_generation WHERE id = 1"


# Each row's counts come with it: the flushed views (Redis holds the rest) and the exact likes.
COUNTS = "coalesce(v.view_count, 0) AS flushed_views, coalesce(l.like_count, 0) AS exact_likes"
COUNTED_MEDIA = (
    f"SELECT {MEDIA_COLUMNS}, {COUNTS} FROM media m "
    "LEFT JOIN media_view_count v ON v.media_id = m.id LEFT JOIN media_like_count l ON l.media_id = m.id"
)


def _rows(by: RankedBy, where: Where, *, limit: int, where_from: int, below: str | None) -> str:
    """Media rows with their counts in rank order (below the position `below`, e.g. `($1, $2)`), at most `limit`."""
    column = by.value
    position = f"(m.{column}, m.id) < {below} AND " if below else ""
    return (
        f"{COUNTED_MEDIA} WHERE {position}{where.sql(first=where_from)} "
        f"ORDER BY m.{column} DESC, m.id DESC LIMIT {int(limit)}"
    )


# Limits are written into the statements, not passed: the read pool runs generic plans
# (`db/reads.py`), and with an unknown LIMIT the planner expects a tenth of the table and
# may sort it instead of walking the index. A statement per page size is a handful.
@cache
def _first_page_sql(by: RankedBy, where_sql: tuple[str, ...], limit: int) -> str:
    where = Where(where_sql)
    return (
        f"SELECT g.generation, p.* FROM ({GENERATION}) g "
        f"LEFT JOIN LATERAL ({_rows(by, where, limit=limit, where_from=1, below=None)}) p ON true "
        f"ORDER BY p.{by.value} DESC, p.id DESC"
    )


@cache
def _later_pages_sql(by: RankedBy, where_sql: tuple[str, ...], limit: int, scan_limit: int) -> str:
    # One row of `w` per page asked for in this batch ($1..$4 arrays): the cursor's
    # position (count, id) and where its scan for changes resumes (generation, id). The scan
    # reads in (generation, id) order, so one cut at its limit has seen every change up to
    # its last (see `OmittedScan.resume_after`).
    where = Where(where_sql)
    column = by.value
    changed = (
        f"SELECT m.id, m.sort_generation FROM media m "
        f"WHERE (m.sort_generation, m.id) > (w.scan_generation, w.scan_id) "
        f"AND (m.{column}, m.id) > (w.at_count, w.at_id) AND {where.sql(first=5)} "
        f"ORDER BY m.sort_generation, m.id LIMIT {int(scan_limit)}"
    )
    rows = _rows(by, where, limit=limit, where_from=5, below="(w.at_count, w.at_id)")
    return (
        f"SELECT w.slot, g.generation, o.ids AS omitted_ids, o.generations AS omitted_generations, p.* "
        f"FROM ({GENERATION}) g "
        "CROSS JOIN unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[]) "
        "WITH ORDINALITY AS w(at_count, at_id, scan_generation, scan_id, slot) "
        f"CROSS JOIN LATERAL (SELECT array_agg(c.id ORDER BY c.sort_generation, c.id) AS ids, "
        f"array_agg(c.sort_generation ORDER BY c.sort_generation, c.id) AS generations FROM ({changed}) c) o "
        f"LEFT JOIN LATERAL ({rows}) p ON true "
        f"ORDER BY w.slot, p.{column} DESC, p.id DESC"
    )


@cache
def _below_sql(by: RankedBy, where_sql: tuple[str, ...], limit: int) -> str:
    return _rows(by, Where(where_sql), limit=limit, where_from=3, below="($1, $2)")


# Where a scan for changes starts: after this (generation, id). A whole generation is (g, LAST_ID).
ScanPoint = tuple[int, int]


@dataclass(frozen=True)
class OmittedScan:
    """Candidates for `omitted`: media above the cursor whose sort key changed after the scan point."""

    ids: list[int]
    # The (generation, id) of the last candidate, when the scan stopped at its limit.
    cut_at: ScanPoint | None

    def resume_after(self, read_at: int) -> ScanPoint:
        """Where the next page's scan starts: every change up to that point was among the ids.

        A generation the page's snapshot saw gains no rows later (a sync commits it only
        after the inserts stamped with it), so a cut inside it can resume from its last id.
        A cut in a later generation (inserts of the next sync's generation, already visible)
        resumes from that generation's start: the sync may still stamp rows of any id into it.
        """
        if self.cut_at is None:
            return (read_at, LAST_ID)
        if self.cut_at[0] <= read_at:
            return self.cut_at
        return (read_at, LAST_ID)


@dataclass(frozen=True)
class RankedRead:
    generation: int
    rows: list[asyncpg.Record]
    omitted: OmittedScan | None = None


def _split(records: list[asyncpg.Record]) -> tuple[int, list[asyncpg.Record]]:
    generation = int(records[0]["generation"])
    # With no rows on the page, the one row carries the generation (and the scan) alone.
    rows = [record for record in records if record["id"] is not None]
    return generation, rows


async def first_page(reads: ReadPool, by: RankedBy, where: Where, *, limit: int) -> RankedRead:
    """The top of the list; first pages asked in the same batch share one read."""
    sql = _first_page_sql(by, where.clauses, limit)
    records = await reads.batches((sql, where.key()), lambda: SameRead(reads, sql, where.args)).ask(None)
    generation, rows = _split(records)
    return RankedRead(generation, rows)


async def later_page(
    reads: ReadPool,
    by: RankedBy,
    where: Where,
    *,
    position: tuple[int, int],
    scan_after: ScanPoint,
    limit: int,
    scan_limit: int,
) -> RankedRead:
    """A page below `position` and the changes above it, read with the other later pages of
    this batch (of the same list and size) in one statement."""
    sql = _later_pages_sql(by, where.clauses, limit, scan_limit)
    batches = reads.batches((sql, where.key()), lambda: LaterPages(reads, sql, where.args))
    records = await batches.ask((*position, *scan_after))
    read_at, rows = _split(records)
    ids = [int(media_id) for media_id in records[0]["omitted_ids"] or ()]
    generations: list[int] = records[0]["omitted_generations"] or []
    cut_at = (int(generations[-1]), ids[-1]) if len(ids) >= scan_limit else None
    return RankedRead(read_at, rows, OmittedScan(ids, cut_at))


# What a later page asks: its position (count, id), then where its scan resumes (generation, id).
_PageAsk = tuple[int, int, int, int]


class LaterPages(SlottedPages[_PageAsk]):
    """Later pages of one list asked in one batch: one statement, one snapshot."""

    def _parameters(self, asks: list[_PageAsk]) -> list[Any]:
        # One array per field of the asks: positions' counts and ids, scans' generations and ids.
        return [list(column) for column in zip(*asks, strict=True)]


async def rows_below(
    reads: ReadPool, by: RankedBy, where: Where, *, position: tuple[int, int], limit: int
) -> list[asyncpg.Record]:
    """More rows below a position, for a page whose first read held too many delivered ones."""
    return await reads.fetch(_below_sql(by, where.clauses, limit), *position, *where.args)


COUNTED_BY_IDS = f"{COUNTED_MEDIA} WHERE m.id = ANY($1)"


async def counted_by_ids(reads: ReadPool, media_ids: list[int]) -> list[asyncpg.Record]:
    """Media rows with their counts, by id (a media deleted since is missing)."""
    return await reads.fetch(COUNTED_BY_IDS, media_ids)
