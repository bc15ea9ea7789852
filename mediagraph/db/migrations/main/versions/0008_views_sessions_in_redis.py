"""Pagination sessions move to Redis; the scan for changed media reads in (generation, id) order.

A page no longer writes to PostgreSQL: what a session delivered lives in Redis with the
session's TTL, so the two session tables go. The scan for `omitted` candidates resumes
from a (generation, id) point, so its index carries the id.

Revision ID: 0008_views_sessions_in_redis
Revises: 0002_views
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_views_sessions_in_redis"
down_revision = "0002_views"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_table("media_page_session_items")
    op.drop_table("media_page_sessions")
    op.create_index("ix_media_sort_generation_id", "media", ["sort_generation", "id"])
    op.drop_index("ix_media_sort_generation", table_name="media")


def downgrade() -> None:
    op.create_index("ix_media_sort_generation", "media", ["sort_generation"])
    op.drop_index("ix_media_sort_generation_id", table_name="media")
    # Sessions were soft state: they come back empty (cursors handed out since answer CURSOR_EXPIRED).
    op.create_table(
        "media_page_sessions",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("sort", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_media_page_sessions"),
    )
    op.create_index("ix_media_page_sessions_last_used_at", "media_page_sessions", ["last_used_at"])
    op.create_table(
        "media_page_session_items",
        sa.Column("session_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("media_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["media_page_sessions.id"],
            name="fk_media_page_session_items_session_id_media_page_sessions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", "media_id", name="pk_media_page_session_items"),
    )
    op.create_index("ix_media_page_session_items_session_id_seq", "media_page_session_items", ["session_id", "seq"])
