"""Shard tables: comments, per-media comment counters, and what moves and replays need.

Every write to `comments`, `comment_counts` or `comment_tombstones` draws a fresh
`revision` from one shard-wide sequence, so a shard move can copy "everything of a
logical shard changed since revision R" through an index instead of rescanning it.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, Column, Index, Integer, Sequence, String, Text, text
from sqlmodel import Field

from mediagraph.db.base import ShardTable, shard_registry, timestamp

# Path enumeration: 5 base62 characters per level, at most 5 levels.
SEGMENT_LENGTH = 5
MAX_DEPTH = 5
MAX_PATH_LENGTH = SEGMENT_LENGTH * MAX_DEPTH

revision_sequence = Sequence("comment_revision_seq", metadata=shard_registry.metadata)
NEXT_REVISION = text("nextval('comment_revision_seq')")


def revision_column() -> object:
    return Field(default=None, sa_column=Column(BigInteger, nullable=False, server_default=NEXT_REVISION))


class Comment(ShardTable, table=True):
    __tablename__ = "comments"
    __table_args__ = (
        # Thread order, sibling allocation and limited counts all walk this index;
        # `id` rides along so page-number queries can skip rows without touching the heap.
        Index("uq_comments_media_id_path", "media_id", "path", unique=True, postgresql_include=["id"]),
        Index("ix_comments_writer_id_id", "writer_id", "id"),
        Index("ix_comments_logical_shard_revision", "logical_shard", "revision"),
        Index("ix_comments_unconfirmed", "id", postgresql_where=text("NOT confirmed")),
    )

    media_id: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    id: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    logical_shard: int = Field(sa_column=Column(Integer, nullable=False))
    # The C collation makes the byte order of 0-9A-Za-z the sort order of paths.
    path: str = Field(sa_column=Column(String(MAX_PATH_LENGTH, collation="C"), nullable=False))
    parent_id: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    writer_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    # Copied from the main database's users table and kept current by the nickname log replay.
    writer_nickname: str = Field(sa_column=Column(String(40), nullable=False))
    # False until the writer's nickname was re-read after the insert (see resolvers.comments).
    confirmed: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=text("false")))
    content: str = Field(sa_column=Column(Text, nullable=False))
    # Marked instead of removed while replies remain; removed with its last reply.
    deleted: bool = Field(default=False, sa_column=Column(Boolean, nullable=False, server_default=text("false")))
    created_at: datetime = timestamp()  # type: ignore[assignment]
    revision: int | None = revision_column()  # type: ignore[assignment]

    @property
    def depth(self) -> int:
        return len(self.path) // SEGMENT_LENGTH


class CommentCount(ShardTable, table=True):
    """Live (not deleted) comments per media; its row lock also serialises a media's comment writes."""

    __tablename__ = "comment_counts"
    __table_args__ = (Index("ix_comment_counts_logical_shard_revision", "logical_shard", "revision"),)

    media_id: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    logical_shard: int = Field(sa_column=Column(Integer, nullable=False))
    comment_count: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default=text("0")))
    revision: int | None = revision_column()  # type: ignore[assignment]


class CommentTombstone(ShardTable, table=True):
    """A removed comment, so a shard move running meanwhile removes its copy too."""

    __tablename__ = "comment_tombstones"

    logical_shard: int = Field(sa_column=Column(Integer, primary_key=True, autoincrement=False))
    revision: int = Field(
        sa_column=Column(BigInteger, primary_key=True, autoincrement=False, server_default=NEXT_REVISION)
    )
    media_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    comment_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    created_at: datetime = timestamp()  # type: ignore[assignment]


class NicknameOffset(ShardTable, table=True):
    """How far this shard applied each nickname log queue: the next log id to apply."""

    __tablename__ = "nickname_offsets"

    queue_id: int = Field(sa_column=Column(Integer, primary_key=True, autoincrement=False))
    applied_offset: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default=text("0")))
