"""Online re-partitioning of leaderboards: the layout a board's readers use, the one its
writers also keep while a move is under way, and each move's progress.

Revision ID: 0010_leaderboard_repartitions
Revises: 0005_leaderboards
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0010_leaderboard_repartitions"
down_revision = "0005_leaderboards"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("leaderboards", sa.Column("layout_generation", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("leaderboards", sa.Column("shadow_bounds", postgresql.ARRAY(sa.Double()), nullable=True))
    op.add_column("leaderboards", sa.Column("shadow_generation", sa.Integer(), nullable=True))
    op.create_table(
        "leaderboard_repartitions",
        sa.Column("leaderboard_id", sa.BigInteger(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("partition_bounds", postgresql.ARRAY(sa.Double()), nullable=False),
        sa.Column("previous_bounds", postgresql.ARRAY(sa.Double()), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("moved_entries", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("total_entries", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["leaderboard_id"],
            ["leaderboards.id"],
            name="fk_leaderboard_repartitions_leaderboard_id_leaderboards",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("leaderboard_id", "generation", name="pk_leaderboard_repartitions"),
    )
    op.create_index(
        "ix_leaderboard_repartitions_unfinished",
        "leaderboard_repartitions",
        ["lease_until"],
        postgresql_where=sa.text("state <> 'DONE'"),
    )


def downgrade() -> None:
    op.drop_index("ix_leaderboard_repartitions_unfinished", table_name="leaderboard_repartitions")
    op.drop_table("leaderboard_repartitions")
    op.drop_column("leaderboards", "shadow_generation")
    op.drop_column("leaderboards", "shadow_bounds")
    op.drop_column("leaderboards", "layout_generation")
