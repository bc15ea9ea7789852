"""Main-database tables of the nickname-change log that keeps nicknames on comments current.

Log ids are per-queue serials handed out under the queue row's lock, never a sequence:
a sequence value says nothing about commit order, so a replayer that saw log 8 commit
before log 7 would record offset 9 and skip log 7 for good. With the row lock, log n+1
cannot be numbered before log n committed (or rolled back and gave its number back).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Column, ForeignKey, Integer, String, text
from sqlalchemy.dialects.postgresql import insert as upsert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import Field, col

from mediagraph.db.base import MainTable, timestamp
from mediagraph.settings import Settings


class NicknameLogQueue(MainTable, table=True):
    __tablename__ = "nickname_log_queues"

    id: int = Field(sa_column=Column(Integer, primary_key=True, autoincrement=False))
    # The id the next log of this queue receives.
    next_offset: int = Field(default=0, sa_column=Column(BigInteger, nullable=False, server_default=text("0")))


class NicknameLog(MainTable, table=True):
    __tablename__ = "nickname_logs"

    queue_id: int = Field(sa_column=Column(Integer, primary_key=True, autoincrement=False))
    id: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    user_id: int = Field(sa_column=Column(BigInteger, ForeignKey("users.id", ondelete="CASCADE"), nullable=False))
    nickname: str = Field(sa_column=Column(String(40), nullable=False))
    created_at: datetime = timestamp()  # type: ignore[assignment]


def queue_of(settings: Settings, user_id: int) -> int:
    # A user's logs always share a queue, so they replay in the order they were made.
    return user_id % settings.nickname_log_queues


async def append_nickname_log(session: AsyncSession, settings: Settings, *, user_id: int, nickname: str) -> int:
    """Log a nickname change inside the caller's transaction; returns the log id.

    The upsert takes the queue row's lock until the caller commits, so concurrent
    changes on one queue number their logs in commit order.
    """
    queue = queue_of(settings, user_id)
    log_id = await session.scalar(
        upsert(NicknameLogQueue)
        .values(id=queue, next_offset=1)
        .on_conflict_do_update(
            index_elements=[col(NicknameLogQueue.id)],
            set_={"next_offset": col(NicknameLogQueue.next_offset) + 1},
        )
        .returning(col(NicknameLogQueue.next_offset) - 1)
    )
    assert log_id is not None
    session.add(NicknameLog(queue_id=queue, id=log_id, user_id=user_id, nickname=nickname))
    return int(log_id)
