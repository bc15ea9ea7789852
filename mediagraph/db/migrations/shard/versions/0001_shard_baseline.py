"""Baseline of every shard database; domain tables branch from here.

Revision ID: 0001_shard_baseline
Revises:
"""

from __future__ import annotations

revision = "0001_shard_baseline"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """A shard starts empty: the comment tables arrive in their own revision."""


def downgrade() -> None:
    """Nothing to undo."""
