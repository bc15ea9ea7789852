"""Two metadata collections: tables of the main database and tables of every shard."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import BigInteger, Column, DateTime, MetaData
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

main_registry = registry(metadata=MetaData(naming_convention=NAMING_CONVENTION))
shard_registry = registry(metadata=MetaData(naming_convention=NAMING_CONVENTION))


class MainTable(SQLModel, registry=main_registry):
    pass


class ShardTable(SQLModel, registry=shard_registry):
    pass


def utcnow() -> datetime:
    return datetime.now(UTC)


def snowflake_key() -> object:
    return Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))


def timestamp() -> object:
    return Field(default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False))
