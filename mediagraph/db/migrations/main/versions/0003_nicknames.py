"""Nickname-change log: per-queue serials and the log the replay worker copies onto every shard.

Revision ID: 0003_nicknames
Revises: 0001_foundation
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_nicknames"
down_revision = "0001_foundation"
branch_labels = ("nicknames",)
depends_on = None


def upgrade() -> None:
    op.create_table(
        "nickname_log_queues",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("next_offset", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.PrimaryKeyConstraint("id", name="pk_nickname_log_queues"),
    )
    op.create_table(
        "nickname_logs",
        sa.Column("queue_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("nickname", sa.String(40), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_nickname_logs_user_id_users", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("queue_id", "id", name="pk_nickname_logs"),
    )


def downgrade() -> None:
    op.drop_table("nickname_logs")
    op.drop_table("nickname_log_queues")
