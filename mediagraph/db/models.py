"""Every table, imported once so each metadata collection is complete (Alembic, tests)."""

from __future__ import annotations

from mediagraph.db import comments, feeds, leaderboards, media, nicknames, playback, shards, users, views  # noqa: F401
from mediagraph.db.base import main_registry, shard_registry

main_metadata = main_registry.metadata
shard_metadata = shard_registry.metadata
