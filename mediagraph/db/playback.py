"""Durable playback statistics: what the roll-up copies out of Redis.

A row copies one Redis counter of one generation (`generation`): Redis counters only
grow within a generation, so the roll-up writes absolute values with GREATEST and may
run any number of times. A counter Redis lost and recreated starts a new generation and
a new row; an entity's figure is the sum over its generations.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Column, DateTime, Integer, String
from sqlmodel import Field

from mediagraph.db.base import MainTable, timestamp


class PlaybackTotal(MainTable, table=True):
    __tablename__ = "playback_totals"

    # "stream" (entity_id is a media id) or "channel" (a user id).
    entity_kind: str = Field(sa_column=Column(String(7), primary_key=True))
    entity_id: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    generation: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    plays: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
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
    updated_at: datetime = timestamp()  # type: ignore[assignment]


# Every generation's all-time plays of some streams and channels (asyncpg: kinds, ids, pairwise).
PLAYBACK_TOTALS_OF = (
    "SELECT t.entity_kind, t.entity_id, t.generation, t.plays FROM playback_totals t "
    "JOIN unnest($1::text[], $2::bigint[]) AS wanted(kind, id) ON t.entity_kind = wanted.kind AND t.entity_id = wanted.id"
)
