"""Follows and follow counts, posts, and the feed outbox.

Revision ID: 0004_feeds
Revises: 0001_foundation
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_feeds"
down_revision = "0001_foundation"
branch_labels = ("feeds",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "follows",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("follower_id", sa.BigInteger(), nullable=False),
        sa.Column("followee_id", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("follower_id <> followee_id", name=op.f("ck_follows_not_self")),
        sa.ForeignKeyConstraint(["follower_id"], ["users.id"], name="fk_follows_follower_id_users", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["followee_id"], ["users.id"], name="fk_follows_followee_id_users", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_follows"),
        sa.UniqueConstraint("follower_id", "followee_id", name="uq_follows_follower_id_followee_id"),
    )
    op.create_index("ix_follows_followee_id_id", "follows", ["followee_id", "id"])
    op.create_index("ix_follows_follower_id_id", "follows", ["follower_id", "id"])
    op.create_table(
        "follow_counts",
        sa.Column("user_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("follower_count", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("following_count", sa.BigInteger(), nullable=False, server_default="0"),
        sa.CheckConstraint("follower_count >= 0", name=op.f("ck_follow_counts_follower_count_not_negative")),
        sa.CheckConstraint("following_count >= 0", name=op.f("ck_follow_counts_following_count_not_negative")),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_follow_counts_user_id_users", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("user_id", name="pk_follow_counts"),
    )
    op.create_table(
        "posts",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("author_id", sa.BigInteger(), nullable=False),
        sa.Column("text", sa.String(300), nullable=False),
        sa.Column("media_id", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["author_id"], ["users.id"], name="fk_posts_author_id_users", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["media_id"], ["media.id"], name="fk_posts_media_id_media", ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id", name="pk_posts"),
    )
    op.create_index("ix_posts_author_id_id", "posts", ["author_id", "id"])
    op.create_index("ix_posts_media_id", "posts", ["media_id"], postgresql_where=sa.text("media_id IS NOT NULL"))
    op.create_table(
        "feed_outbox",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("subject_id", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_feed_outbox"),
    )


def downgrade() -> None:
    op.drop_table("feed_outbox")
    op.drop_index("ix_posts_media_id", table_name="posts")
    op.drop_index("ix_posts_author_id_id", table_name="posts")
    op.drop_table("posts")
    op.drop_table("follow_counts")
    op.drop_index("ix_follows_follower_id_id", table_name="follows")
    op.drop_index("ix_follows_followee_id_id", table_name="follows")
    op.drop_table("follows")
