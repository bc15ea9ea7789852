"""View counts and likes.

Hot counters live in tables of their own (`media_view_count`, `media_like_count`) so
their updates never rewrite or lock `media` rows; a periodic sync copies them into the
indexed sort columns of `media` and stamps each row it changes with a sync generation.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, Column, ForeignKey, Identity, Index, SmallInteger
from sqlalchemy.dialects.postgresql import UUID
from sqlmodel import Field

from mediagraph.db.base import MainTable, timestamp


def _media_key() -> object:
    return Field(
        sa_column=Column(BigInteger, ForeignKey("media.id", ondelete="CASCADE"), primary_key=True, autoincrement=False)
    )


class MediaViewCount(MainTable, table=True):
    """Views flushed from Redis: the durable part of a media's view count."""

    __tablename__ = "media_view_count"

    media_id: int = _media_key()  # type: ignore[assignment]
    view_count: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))


class MediaViewBatch(MainTable, table=True):
    """Flush batches already applied: inserted in the applying transaction, so a batch applies once."""

    __tablename__ = "media_view_batches"
    __table_args__ = (Index("ix_media_view_batches_applied_at", "applied_at"),)

    id: uuid.UUID = Field(sa_column=Column(UUID(as_uuid=True), primary_key=True))
    applied_at: datetime = timestamp()  # type: ignore[assignment]


class MediaLike(MainTable, table=True):
    __tablename__ = "media_likes"
    __table_args__ = (Index("ix_media_likes_user_id_media_id", "user_id", "media_id"),)

    media_id: int = _media_key()  # type: ignore[assignment]
    user_id: int = Field(
        sa_column=Column(BigInteger, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, autoincrement=False)
    )
    created_at: datetime = timestamp()  # type: ignore[assignment]


class MediaLikeCount(MainTable, table=True):
    """Exactly the number of `media_likes` rows of a media, kept in the same transactions."""

    __tablename__ = "media_like_count"

    media_id: int = _media_key()  # type: ignore[assignment]
    like_count: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))


class MediaCountChange(MainTable, table=True):
    """Media whose counts changed since the last sync; the sync consumes (deletes) what it copies.

    Consumed by deleting the rows it saw rather than by remembering the highest id read,
    so a change whose id was drawn earlier but committed later is never skipped.
    """

    __tablename__ = "media_count_changes"

    id: int = Field(sa_column=Column(BigInteger, Identity(), primary_key=True))
    media_id: int = Field(sa_column=Column(BigInteger, nullable=False))


class MediaSortGeneration(MainTable, table=True):
    """One row: the number of the last sync that changed sort columns of `media`.

    A sync holds it FOR UPDATE while it runs and inserts of media hold it FOR SHARE
    (see the migration's trigger), so generations become visible in order and a
    snapshot that sees generation g sees every change stamped g or lower.
    """

    __tablename__ = "media_sort_generation"

    id: int = Field(default=1, sa_column=Column(SmallInteger, primary_key=True, autoincrement=False))
    generation: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
