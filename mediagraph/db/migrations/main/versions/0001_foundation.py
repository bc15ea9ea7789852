"""Users, media, bookmarks and the logical-to-physical shard map.

Revision ID: 0001_foundation
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001_foundation"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("username", sa.String(32), nullable=False),
        sa.Column("nickname", sa.String(40), nullable=False),
        sa.Column("password_hash", sa.String(200), nullable=False),
        sa.Column("role", sa.String(16), nullable=False, server_default="user"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("nickname_changed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("token_version", sa.BigInteger(), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("id", name="pk_users"),
        sa.UniqueConstraint("username", name="uq_users_username"),
    )
    op.create_table(
        "media",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("owner_id", sa.BigInteger(), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("tags", postgresql.ARRAY(sa.String(32)), nullable=False),
        sa.Column("content_type", sa.String(100), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("storage_key", sa.String(255), nullable=False),
        sa.Column("view_count", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], name="fk_media_owner_id_users", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_media"),
    )
    op.create_index("ix_media_owner_id_id", "media", ["owner_id", "id"])
    op.create_index("ix_media_view_count_id", "media", ["view_count", "id"])
    op.create_index("ix_media_tags", "media", ["tags"], postgresql_using="gin")
    op.create_table(
        "bookmarks",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("media_id", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_bookmarks_user_id_users", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["media_id"], ["media.id"], name="fk_bookmarks_media_id_media", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_bookmarks"),
        sa.UniqueConstraint("user_id", "media_id", name="uq_bookmarks_user_id_media_id"),
    )
    op.create_index("ix_bookmarks_user_id_id", "bookmarks", ["user_id", "id"])
    op.create_table(
        "shard_map",
        sa.Column("logical_shard", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("physical_shard", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("logical_shard", name="pk_shard_map"),
    )


def downgrade() -> None:
    op.drop_table("shard_map")
    op.drop_table("bookmarks")
    op.drop_table("media")
    op.drop_table("users")
