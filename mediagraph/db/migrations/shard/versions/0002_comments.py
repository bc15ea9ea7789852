"""Comments, per-media comment counts, tombstones, nickname offsets and hosted logical shards.

Revision ID: 0002_comments
Revises: 0001_shard_baseline
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.schema import CreateSequence, DropSequence

revision = "0002_comments"
down_revision = "0001_shard_baseline"
branch_labels = None
depends_on = None

NEXT_REVISION = sa.text("nextval('comment_revision_seq')")


def upgrade() -> None:
    op.execute(CreateSequence(sa.Sequence("comment_revision_seq")))
    op.create_table(
        "comments",
        sa.Column("media_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("logical_shard", sa.Integer(), nullable=False),
        sa.Column("path", sa.String(25, collation="C"), nullable=False),
        sa.Column("parent_id", sa.BigInteger(), nullable=True),
        sa.Column("writer_id", sa.BigInteger(), nullable=False),
        sa.Column("writer_nickname", sa.String(40), nullable=False),
        sa.Column("confirmed", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False, server_default=sa.text("false")),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False, server_default=NEXT_REVISION),
        sa.PrimaryKeyConstraint("media_id", "id", name="pk_comments"),
    )
    op.create_index(
        "uq_comments_media_id_path", "comments", ["media_id", "path"], unique=True, postgresql_include=["id"]
    )
    op.create_index("ix_comments_writer_id_id", "comments", ["writer_id", "id"])
    op.create_index("ix_comments_logical_shard_revision", "comments", ["logical_shard", "revision"])
    op.create_index("ix_comments_unconfirmed", "comments", ["id"], postgresql_where=sa.text("NOT confirmed"))
    op.create_table(
        "comment_counts",
        sa.Column("media_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("logical_shard", sa.Integer(), nullable=False),
        sa.Column("comment_count", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("revision", sa.BigInteger(), nullable=False, server_default=NEXT_REVISION),
        sa.PrimaryKeyConstraint("media_id", name="pk_comment_counts"),
    )
    op.create_index("ix_comment_counts_logical_shard_revision", "comment_counts", ["logical_shard", "revision"])
    op.create_table(
        "comment_tombstones",
        sa.Column("logical_shard", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("revision", sa.BigInteger(), autoincrement=False, nullable=False, server_default=NEXT_REVISION),
        sa.Column("media_id", sa.BigInteger(), nullable=False),
        sa.Column("comment_id", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("logical_shard", "revision", name="pk_comment_tombstones"),
    )
    op.create_table(
        "nickname_offsets",
        sa.Column("queue_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("applied_offset", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.PrimaryKeyConstraint("queue_id", name="pk_nickname_offsets"),
    )
    op.create_table(
        "hosted_logical_shards",
        sa.Column("logical_shard", sa.Integer(), autoincrement=False, nullable=False),
        sa.PrimaryKeyConstraint("logical_shard", name="pk_hosted_logical_shards"),
    )


def downgrade() -> None:
    op.drop_table("hosted_logical_shards")
    op.drop_table("nickname_offsets")
    op.drop_table("comment_tombstones")
    op.drop_table("comment_counts")
    op.drop_table("comments")
    op.execute(DropSequence(sa.Sequence("comment_revision_seq")))
