from __future__ import annotations

from sqlalchemy import Column, Integer
from sqlmodel import Field

from mediagraph.db.base import MainTable


class ShardMapping(MainTable, table=True):
    """Which physical shard holds each logical shard (logical shard = media id mod L)."""

    __tablename__ = "shard_map"

    logical_shard: int = Field(sa_column=Column(Integer, primary_key=True, autoincrement=False))
    physical_shard: int = Field(sa_column=Column(Integer, nullable=False))
