"""Durable live-playback statistics: totals and minute/hour/day buckets per stream and channel.

Revision ID: 0006_playback
Revises: 0001_foundation
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_playback"
down_revision = "0001_foundation"
branch_labels = ("playback",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "playback_totals",
        sa.Column("entity_kind", sa.String(7), nullable=False),
        sa.Column("entity_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("generation", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("plays", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("entity_kind", "entity_id", "generation", name="pk_playback_totals"),
    )
    op.create_table(
        "playback_buckets",
        sa.Column("entity_kind", sa.String(7), nullable=False),
        sa.Column("entity_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("granularity", sa.String(6), nullable=False),
        sa.Column("bucket_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("generation", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("plays", sa.BigInteger(), nullable=False),
        sa.Column("peak", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "entity_kind", "entity_id", "granularity", "bucket_start", "generation", name="pk_playback_buckets"
        ),
    )


def downgrade() -> None:
    op.drop_table("playback_buckets")
    op.drop_table("playback_totals")
