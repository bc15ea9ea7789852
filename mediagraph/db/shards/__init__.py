from __future__ import annotations

from sqlalchemy import Column, Integer
from sqlmodel import Field

from mediagraph.db.base import MainTable, ShardTable


class ShardMapping(MainTable, table=True):
    """Which physical shard holds each logical shard (logical shard = media id mod L)."""

    __tablename__ = "shard_map"

    logical_shard: int = Field(sa_column=Column(Integer, primary_key=True, autoincrement=False))
    physical_shard: int = Field(sa_column=Column(Integer, nullable=False))


class HostedLogicalShard(ShardTable, table=True):
    """On each shard database: the logical shards it currently owns.

    Writers check for the row (under the logical shard's advisory lock, see
    `db.residency`) before writing its rows; a shard move deletes it while it holds
    that lock exclusively. A writer whose cached routing is stale finds no row,
    reloads the routing and goes to the new home.
    """

    __tablename__ = "hosted_logical_shards"

    logical_shard: int = Field(sa_column=Column(Integer, primary_key=True, autoincrement=False))
