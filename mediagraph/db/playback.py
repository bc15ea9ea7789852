"""Durable playback statistics: what the roll-up copies out of Redis.

A row copies one Redis counter of one generation (`generation`): Redis counters only
grow within a generation, so the roll-up writes absolute values with GREATEST and may
run any number of times. A counter Redis lost and recreated starts a new generation and
a new row; an entity's figure is the sum over its generations.

Plays (`plays`): one row per playback session, partitioned by the UTC day it started
(`plays_YYYYMMDD`), written by the roll-up from the session records in Redis: one
statement per batch with absolute values under GREATEST, so a replayed batch changes
nothing. Partitions are made ahead and dropped after `play_history_days`.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta

import asyncpg
from sqlalchemy import BigInteger, Column, DateTime, Integer, Select, String, Uuid, select, tuple_
from sqlmodel import Field, col

from mediagraph.db.base import MainTable, timestamp
from mediagraph.db.reads import ReadPool


class PlaybackTotal(MainTable, table=True):
    __tablename__ = "playback_totals"

    # "stream" (entity_id is a media id) or "channel" (a user id).
    entity_kind: str = Field(sa_column=Column(String(7), primary_key=True))
    entity_id: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    generation: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    plays: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    # Watched milliseconds (owner-only figures).
    watch_ms: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
    updated_at: datetime = timestamp()  # type: ignore[assignment]


class PlaybackBucket(MainTable, table=True):
    __tablename__ = "playback_buckets"

    entity_kind: str = Field(sa_column=Column(String(7), primary_key=True))
    entity_id: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    # "minute", "hour" or "day"; bucket_start is the bucket's first instant (UTC).
    granularity: str = Field(sa_column=Column(String(6), primary_key=True))
    bucket_start: datetime = Field(sa_column=Column(DateTime(timezone=True), primary_key=True))
    generation: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    plays: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    peak: int = Field(default=0, sa_column=Column(Integer, nullable=False))
    # Watched milliseconds counted at heartbeats played in the bucket, and distinct viewers
    # (signed-in by id, each anonymous play as one): kept here so they outlive play rows.
    watch_ms: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
    unique_viewers: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
    updated_at: datetime = timestamp()  # type: ignore[assignment]


# Every generation's all-time plays of some streams and channels (asyncpg: kinds, ids, pairwise).
PLAYBACK_TOTALS_OF = (
    "SELECT t.entity_kind, t.entity_id, t.generation, t.plays, t.watch_ms FROM playback_totals t "
    "JOIN unnest($1::text[], $2::bigint[]) AS wanted(kind, id) ON t.entity_kind = wanted.kind AND t.entity_id = wanted.id"
)


class Play(MainTable, table=True):
    """One playback session (its uuid), in the partition of the day it started."""

    __tablename__ = "plays"
    __table_args__ = {"postgresql_partition_by": "RANGE (started_at)"}

    started_at: datetime = Field(sa_column=Column(DateTime(timezone=True), primary_key=True))
    id: uuid.UUID = Field(sa_column=Column(Uuid, primary_key=True))
    media_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    channel_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    viewer_id: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    last_heartbeat_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
    # Watched milliseconds; the play has ended when last_heartbeat_at is older than the live window.
    watch_ms: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))


PARTITION_PREFIX = "plays_"

# Plays by their key and channel (asyncpg: channels, starts, uuids, pairwise): the primary key finds
# each in its day's partition, and a key naming another channel finds nothing.
PLAYS_BY_KEY = (
    "SELECT p.channel_id, p.started_at, p.id, p.media_id, p.last_heartbeat_at, p.watch_ms FROM plays p "
    "JOIN unnest($1::bigint[], $2::timestamptz[], $3::uuid[]) AS wanted(channel_id, started_at, id) "
    "ON p.started_at = wanted.started_at AND p.id = wanted.id AND p.channel_id = wanted.channel_id"
)

# One batch of plays (arrays, pairwise): absolute values, so a replay changes nothing; the
# WHERE skips rows already holding them (not even a new row version).
UPSERT_PLAYS = """
INSERT INTO plays (started_at, id, media_id, channel_id, viewer_id, last_heartbeat_at, watch_ms)
SELECT * FROM unnest($1::timestamptz[], $2::uuid[], $3::bigint[], $4::bigint[], $5::bigint[],
                     $6::timestamptz[], $7::bigint[])
ON CONFLICT (started_at, id) DO UPDATE SET
  last_heartbeat_at = GREATEST(plays.last_heartbeat_at, EXCLUDED.last_heartbeat_at),
  watch_ms = GREATEST(plays.watch_ms, EXCLUDED.watch_ms)
WHERE plays.last_heartbeat_at < EXCLUDED.last_heartbeat_at OR plays.watch_ms < EXCLUDED.watch_ms
"""

# One batch of counter values each (arrays, pairwise), for the roll-up: absolute values under
# GREATEST, so a replay changes nothing. Ordered by primary key, so concurrent roll-ups
# wait on each other's rows instead of deadlocking.
UPSERT_TOTALS = """
INSERT INTO playback_totals AS t (entity_kind, entity_id, generation, plays, watch_ms, updated_at)
SELECT * FROM unnest($1::varchar[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::timestamptz[])
ORDER BY 1, 2, 3
ON CONFLICT (entity_kind, entity_id, generation) DO UPDATE SET
  plays = GREATEST(t.plays, EXCLUDED.plays),
  watch_ms = GREATEST(t.watch_ms, EXCLUDED.watch_ms),
  updated_at = EXCLUDED.updated_at
"""

UPSERT_BUCKETS = """
INSERT INTO playback_buckets AS b
  (entity_kind, entity_id, granularity, bucket_start, generation, plays, peak, watch_ms, unique_viewers, updated_at)
SELECT * FROM unnest($1::varchar[], $2::bigint[], $3::varchar[], $4::timestamptz[], $5::bigint[], $6::bigint[],
                     $7::integer[], $8::bigint[], $9::bigint[], $10::timestamptz[])
ORDER BY 1, 2, 3, 4, 5
ON CONFLICT (entity_kind, entity_id, granularity, bucket_start, generation) DO UPDATE SET
  plays = GREATEST(b.plays, EXCLUDED.plays),
  peak = GREATEST(b.peak, EXCLUDED.peak),
  watch_ms = GREATEST(b.watch_ms, EXCLUDED.watch_ms),
  unique_viewers = GREATEST(b.unique_viewers, EXCLUDED.unique_viewers),
  updated_at = EXCLUDED.updated_at
"""

TotalRow = tuple[str, int, int, int, int, datetime]
BucketRow = tuple[str, int, str, datetime, int, int, int, int, int, datetime]


async def upsert_counters(reads: ReadPool, totals: Sequence[TotalRow], buckets: Sequence[BucketRow]) -> None:
    """Write a roll-up's counter values, one statement per kind (idempotent, so safe to repeat):
    totals as (kind, id, generation, plays, watch_ms, updated_at), buckets as (kind, id,
    granularity, start, generation, plays, peak, watch_ms, unique_viewers, updated_at)."""
    for statement, rows in ((UPSERT_TOTALS, totals), (UPSERT_BUCKETS, buckets)):
        if rows:
            await reads.fetch(statement, *(list(column) for column in zip(*rows, strict=True)))


PLAY_PARTITIONS = (
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
    "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'plays'"
)


def partition_name(day: date) -> str:
    return f"{PARTITION_PREFIX}{day:%Y%m%d}"


def day_of_partition(name: str) -> date | None:
    if not name.startswith(PARTITION_PREFIX):
        return None
    try:
        return datetime.strptime(name[len(PARTITION_PREFIX) :], "%Y%m%d").replace(tzinfo=UTC).date()
    except ValueError:
        return None


def _day_start(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


async def create_partition(reads: ReadPool, day: date) -> None:
    """The day's partition of `plays`, unless it exists (two workers may race: both fine)."""
    start, end = _day_start(day), _day_start(day + timedelta(days=1))
    statement = (
        f"CREATE TABLE IF NOT EXISTS {partition_name(day)} PARTITION OF plays "
        f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
    )
    with contextlib.suppress(asyncpg.DuplicateTableError, asyncpg.UniqueViolationError):
        await reads.fetch(statement)


async def partition_days(reads: ReadPool) -> list[date]:
    rows = await reads.fetch(PLAY_PARTITIONS)
    return sorted(day for row in rows if (day := day_of_partition(row["relname"])) is not None)


async def drop_partition(reads: ReadPool, day: date) -> None:
    await reads.fetch(f"DROP TABLE IF EXISTS {partition_name(day)}")


async def upsert_plays(
    reads: ReadPool,
    rows: Sequence[tuple[datetime, uuid.UUID, int, int, int | None, datetime, int]],
) -> None:
    """Write a batch of plays in one statement: (started_at, id, media, channel, viewer, last, watch_ms)."""
    if not rows:
        return
    # One order for every writer, so concurrent roll-ups wait instead of deadlocking.
    ordered = sorted(rows, key=lambda row: (row[0], row[1]))
    columns = list(zip(*ordered, strict=True))
    await reads.fetch(UPSERT_PLAYS, *(list(column) for column in columns))


def plays_page(
    *,
    stream: int | None,
    channel: int | None,
    since: datetime | None,
    until: datetime | None,
    beyond: tuple[datetime, uuid.UUID] | None,
    limit: int,
    backward: bool,
) -> Select[datetime, uuid.UUID, int, datetime, int]:
    """A stream's (or a channel's) plays that started in [since, until), newest first, after the
    key `beyond` (backward: before it, nearest first), served by the (media|channel, started_at, id)
    indexes; the bounds on started_at also prune the day partitions read."""
    key = tuple_(col(Play.started_at), col(Play.id))
    query = select(
        col(Play.started_at), col(Play.id), col(Play.media_id), col(Play.last_heartbeat_at), col(Play.watch_ms)
    )
    if stream is not None:
        query = query.where(col(Play.media_id) == stream)
    if channel is not None:
        query = query.where(col(Play.channel_id) == channel)
    if since is not None:
        query = query.where(col(Play.started_at) >= since)
    if until is not None:
        query = query.where(col(Play.started_at) < until)
    if beyond is not None:
        query = query.where(key > tuple_(*beyond) if backward else key < tuple_(*beyond))
        # The same bound on started_at alone, which (unlike the row comparison) prunes partitions.
        started = col(Play.started_at)
        query = query.where(started >= beyond[0] if backward else started <= beyond[0])
    order = (
        (col(Play.started_at).asc(), col(Play.id).asc())
        if backward
        else (
            col(Play.started_at).desc(),
            col(Play.id).desc(),
        )
    )
    return query.order_by(*order).limit(limit)
