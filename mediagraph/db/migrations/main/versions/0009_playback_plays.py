"""Plays as durable records (partitioned by day), and watch time and distinct viewers on roll-ups.

Revision ID: 0009_playback_plays
Revises: 0006_playback
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_playback_plays"
down_revision = "0006_playback"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("playback_totals", sa.Column("watch_ms", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("playback_buckets", sa.Column("watch_ms", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("playback_buckets", sa.Column("unique_viewers", sa.BigInteger(), nullable=False, server_default="0"))
    # Partitions (plays_YYYYMMDD) are made by the playback worker, ahead of time and on demand.
    op.create_table(
        "plays",
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("media_id", sa.BigInteger(), nullable=False),
        sa.Column("channel_id", sa.BigInteger(), nullable=False),
        sa.Column("viewer_id", sa.BigInteger(), nullable=True),
        sa.Column("last_heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("watch_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("started_at", "id", name="pk_plays"),
        postgresql_partition_by="RANGE (started_at)",
    )
    # A stream's and a channel's plays, newest first (keyset pages).
    op.create_index("ix_plays_media_id_started_at_id", "plays", ["media_id", "started_at", "id"])
    op.create_index("ix_plays_channel_id_started_at_id", "plays", ["channel_id", "started_at", "id"])


def downgrade() -> None:
    op.drop_table("plays")
    op.drop_column("playback_buckets", "unique_viewers")
    op.drop_column("playback_buckets", "watch_ms")
    op.drop_column("playback_totals", "watch_ms")
