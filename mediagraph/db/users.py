from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Column, DateTime, String
from sqlmodel import Field

from mediagraph.db.base import MainTable, snowflake_key, timestamp


class User(MainTable, table=True):
    __tablename__ = "users"

    id: int = snowflake_key()  # type: ignore[assignment]
    # Stored lower-cased so that "Alice" and "alice" cannot both register.
    username: str = Field(sa_column=Column(String(32), nullable=False, unique=True))
    nickname: str = Field(sa_column=Column(String(40), nullable=False))
    password_hash: str = Field(sa_column=Column(String(200), nullable=False))
    role: str = Field(default="user", sa_column=Column(String(16), nullable=False))
    created_at: datetime = timestamp()  # type: ignore[assignment]
    nickname_changed_at: datetime | None = Field(default=None, sa_column=Column(DateTime(timezone=True), nullable=True))
    # Bumped to revoke every token issued before it (password change, logout everywhere).
    token_version: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
