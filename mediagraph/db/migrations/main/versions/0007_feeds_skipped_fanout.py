"""The newest post of each author that fan-out skipped, so readers merge it whatever the author's count is now.

Revision ID: 0007_feeds_skipped_fanout
Revises: 0004_feeds
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_feeds_skipped_fanout"
down_revision = "0004_feeds"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("follow_counts", sa.Column("last_skipped_post_id", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("follow_counts", "last_skipped_post_id")
