"""Leaderboard definitions and durable per-period score records.

Revision ID: 0005_leaderboards
Revises: 0001_foundation
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005_leaderboards"
down_revision = "0001_foundation"
branch_labels = ("leaderboards",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "leaderboards",
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("sort_order", sa.String(8), nullable=False),
        sa.Column("operator", sa.String(16), nullable=False),
        sa.Column("period", sa.String(16), nullable=False),
        sa.Column("partition_bounds", postgresql.ARRAY(sa.Double()), nullable=False),
        sa.Column("min_score", sa.Double(), nullable=False),
        sa.Column("max_score", sa.Double(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_leaderboards"),
        sa.UniqueConstraint("name", name="uq_leaderboards_name"),
    )
    op.create_table(
        "leaderboard_scores",
        sa.Column("leaderboard_id", sa.BigInteger(), nullable=False),
        sa.Column("period", sa.String(16), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("score", sa.Double(), nullable=False),
        sa.Column("reached_id", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["leaderboard_id"],
            ["leaderboards.id"],
            name="fk_leaderboard_scores_leaderboard_id_leaderboards",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name="fk_leaderboard_scores_user_id_users", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("leaderboard_id", "period", "user_id", name="pk_leaderboard_scores"),
    )
    op.create_index("ix_leaderboard_scores_user_id", "leaderboard_scores", ["user_id"])


def downgrade() -> None:
    op.drop_table("leaderboard_scores")
    op.drop_table("leaderboards")
