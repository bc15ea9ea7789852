from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import BigInteger, Column, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.dialects.postgresql import ARRAY
from sqlmodel import Field

from mediagraph.db.base import MainTable, snowflake_key, timestamp
from mediagraph.db.rows import Where, select_all


class Media(MainTable, table=True):
    __tablename__ = "media"
    __table_args__ = (
        Index("ix_media_owner_id_id", "owner_id", "id"),
        Index("ix_media_view_count_id", "view_count", "id"),
        Index("ix_media_like_count_id", "like_count", "id"),
        Index("ix_media_sort_generation_id", "sort_generation", "id"),
        Index("ix_media_tags", "tags", postgresql_using="gin"),
    )

    id: int = snowflake_key()  # type: ignore[assignment]
    owner_id: int = Field(sa_column=Column(BigInteger, ForeignKey("users.id", ondelete="CASCADE"), nullable=False))
    title: str = Field(sa_column=Column(String(200), nullable=False))
    description: str = Field(default="", sa_column=Column(Text, nullable=False))
    tags: list[str] = Field(default_factory=list, sa_column=Column(ARRAY(String(32)), nullable=False))
    content_type: str = Field(sa_column=Column(String(100), nullable=False))
    filename: str = Field(sa_column=Column(String(255), nullable=False))
    size_bytes: int = Field(sa_column=Column(BigInteger, nullable=False))
    storage_key: str = Field(sa_column=Column(String(255), nullable=False))
    # Synced periodically from the hot media_view_count table; indexed for sorting.
    view_count: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    # Synced from media_like_count for the LIKES sort; the exact figure stays in that table.
    like_count: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
    # The sync generation that last changed this row's sort columns (set on insert by a trigger).
    sort_generation: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default="0"))
    created_at: datetime = timestamp()  # type: ignore[assignment]
    updated_at: datetime = timestamp()  # type: ignore[assignment]


class Bookmark(MainTable, table=True):
    __tablename__ = "bookmarks"
    __table_args__ = (
        Index("ix_bookmarks_user_id_id", "user_id", "id"),
        UniqueConstraint("user_id", "media_id"),
    )

    id: int = snowflake_key()  # type: ignore[assignment]
    user_id: int = Field(sa_column=Column(BigInteger, ForeignKey("users.id", ondelete="CASCADE"), nullable=False))
    media_id: int = Field(sa_column=Column(BigInteger, ForeignKey("media.id", ondelete="CASCADE"), nullable=False))
    created_at: datetime = timestamp()  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class MediaCounts:
    """A media's counts, read with its row: likes exactly, views with those not flushed yet
    (None when the request did not ask for views, which then load on their own)."""

    views: int | None
    likes: int


# Which of some media ids still exist (asyncpg: media ids).
EXISTING_MEDIA = "SELECT id FROM media WHERE id = ANY($1)"

# Media rows, to which a `Where` and an order are appended (asyncpg, the read path).
ALL_MEDIA = select_all(Media)

# Whether a user bookmarked each of some media (asyncpg: user id, media ids).
BOOKMARKED_BY_USER = "SELECT media_id FROM bookmarks WHERE user_id = $1 AND media_id = ANY($2)"


def with_tags(tags: list[str], *, all_of: bool) -> Where:
    """Media carrying all (or any) of `tags`; every media when there are none."""
    if not tags:
        return Where()
    return Where().and_("tags @> {}" if all_of else "tags && {}", tags)


def owned_by(owner_id: int) -> Where:
    return Where().and_("owner_id = {}", owner_id)


def newer_media(where: Where) -> str:
    """Backward pages of a newest-first listing: `$1` the id to go above, `$2` the limit, nearest first."""
    return f"{ALL_MEDIA} WHERE {where.sql(first=3)} AND id > $1 ORDER BY id LIMIT $2"
