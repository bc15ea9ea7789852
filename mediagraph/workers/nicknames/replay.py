"""The replay of the nickname-change log onto every shard (the seed's option 1), run by the worker.

A change appends a log row in the same transaction that changes the nickname, numbered
by its queue's serial under the queue row's lock. The replayer applies a shard's logs in
order and records the shard's offset in the same shard transaction as the updates, so
a crash at any point leaves either both or neither: each log is applied exactly once in
effect (re-applying a nickname is harmless). A shard too far behind, or one whose logs
were pruned, is resynced from the users table instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert as upsert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from mediagraph.db.base import utcnow
from mediagraph.db.comments import Comment, NicknameOffset
from mediagraph.db.comments import nicknames as comment_nicknames
from mediagraph.db.nicknames import NicknameLog, NicknameLogQueue
from mediagraph.db.shards.residency import on_physical_shard, read_shard
from mediagraph.db.users import User
from mediagraph.ids import snowflake_floor
from mediagraph.services import Services

RESYNC_USER_BATCH = 1_000
REPAIR_BATCH = 500


class LogsPruned(Exception):
    """The logs this shard needs next were pruned: only a resync can bring it current."""


@dataclass
class ReplayReport:
    applied: int = 0
    resynced: bool = False


async def queue_heads(services: Services) -> dict[int, int]:
    """Each queue's next log id, as the main database has it now."""
    async with services.databases.main_session() as session:
        rows = await session.execute(select(col(NicknameLogQueue.id), col(NicknameLogQueue.next_offset)))
        return dict(rows.all())


async def shard_offsets(services: Services, physical: int) -> dict[int, int]:
    async def work(session: AsyncSession) -> dict[int, int]:
        rows = await session.execute(select(col(NicknameOffset.queue_id), col(NicknameOffset.applied_offset)))
        return dict(rows.all())

    return await read_shard(services, physical, work)


async def _lock_offset(session: AsyncSession, queue: int) -> int:
    offset = await session.scalar(
        upsert(NicknameOffset)
        .values(queue_id=queue, applied_offset=0)
        .on_conflict_do_update(
            index_elements=[col(NicknameOffset.queue_id)],
            set_={"applied_offset": col(NicknameOffset.applied_offset)},
        )
        .returning(col(NicknameOffset.applied_offset))
    )
    assert offset is not None
    return int(offset)


async def _logs_from(services: Services, queue: int, offset: int, limit: int) -> list[NicknameLog]:
    async with services.databases.main_session() as session:
        rows = await session.scalars(
            select(NicknameLog)
            .where(col(NicknameLog.queue_id) == queue, col(NicknameLog.id) >= offset)
            .order_by(col(NicknameLog.id))
            .limit(limit)
        )
        return list(rows)


async def replay_batch(services: Services, physical: int, queue: int, *, head: int, limit: int) -> int:
    """Apply the next logs of one queue to one shard, offset included, in one shard transaction.

    `head` is a queue head read earlier: every log below it has committed, so a missing
    one was pruned.
    """

    async def work(session: AsyncSession, hosted: frozenset[int]) -> int:
        offset = await _lock_offset(session, queue)  # held: concurrent replayers take turns
        logs = await _logs_from(services, queue, offset, limit)
        if (logs[0].id if logs else head) > offset:
            raise LogsPruned(queue)
        if not logs:
            return 0
        latest = {log.user_id: log.nickname for log in logs}  # later logs of a user win
        await comment_nicknames.apply_nicknames(session, latest, hosted)
        await session.execute(
            NicknameOffset.__table__.update()  # type: ignore[attr-defined]
            .where(NicknameOffset.__table__.c.queue_id == queue)  # type: ignore[attr-defined]
            .values(applied_offset=logs[-1].id + 1)
        )
        return len(logs)

    return await on_physical_shard(services, physical, work)


async def replay_shard(services: Services, physical: int, *, resync_lag: int | None = None) -> ReplayReport:
    """Bring one shard up to every queue's head: by replaying, or by a resync when too far behind."""
    settings = services.settings
    lag_limit = settings.nickname_resync_lag if resync_lag is None else resync_lag
    heads = await queue_heads(services)
    offsets = await shard_offsets(services, physical)
    report = ReplayReport()
    if any(head - offsets.get(queue, 0) > lag_limit for queue, head in heads.items()):
        await resync_shard(services, physical)
        return ReplayReport(resynced=True)
    try:
        for queue, head in heads.items():
            while applied := await replay_batch(
                services, physical, queue, head=head, limit=settings.nickname_replay_batch
            ):
                report.applied += applied
    except LogsPruned:
        await resync_shard(services, physical)
        report.resynced = True
    return report


async def resync_shard(services: Services, physical: int) -> None:
    """Rewrite every writer's nickname on the shard from the users table, then jump the offsets.

    The heads are read first: every change logged before them is in the users table
    by the time it is read, and every later one is replayed afterwards.
    """
    heads = await queue_heads(services)
    before = await shard_offsets(services, physical)
    after_id = 0
    while True:
        async with services.databases.main_session() as session:
            rows = await session.execute(
                select(col(User.id), col(User.nickname))
                .where(col(User.id) > after_id)
                .order_by(col(User.id))
                .limit(RESYNC_USER_BATCH)
            )
            users = dict(rows.all())
        if not users:
            break

        async def apply(session: AsyncSession, hosted: frozenset[int], batch: Mapping[int, str] = users) -> int:
            return await comment_nicknames.apply_nicknames(session, batch, hosted)

        await on_physical_shard(services, physical, apply)
        after_id = max(users)

    async def jump(session: AsyncSession, hosted: frozenset[int]) -> None:
        for queue, head in heads.items():
            # Only from where the resync started: a move may have lowered the offset meanwhile
            # for rows it copied in after their writer was passed, and those need the replay.
            await comment_nicknames.jump_offset(session, queue, head, before=before.get(queue, 0))

    await on_physical_shard(services, physical, jump)


async def repair_unconfirmed(services: Services, physical: int, *, grace_seconds: float | None = None) -> int:
    """Finish comments whose creation stopped after the insert (steps 3 and 4 never ran)."""
    grace = services.settings.comment_confirm_grace_seconds if grace_seconds is None else grace_seconds
    below_id = snowflake_floor(utcnow() - timedelta(seconds=grace))
    repaired = 0
    while True:

        async def pending(session: AsyncSession) -> list[Comment]:
            return await comment_nicknames.unconfirmed(session, below_id=below_id, limit=REPAIR_BATCH)

        comments = await read_shard(services, physical, pending)
        if not comments:
            return repaired
        # Read after the shard rows: a replay landing in between changes the row and the
        # compare-and-set then leaves the newer nickname in place.
        writers = {comment.writer_id for comment in comments}
        async with services.databases.main_session() as session:
            rows = await session.execute(select(col(User.id), col(User.nickname)).where(col(User.id).in_(writers)))
            nicknames = dict(rows.all())

        async def fix(
            session: AsyncSession,
            hosted: frozenset[int],
            batch: list[Comment] = comments,
            current: dict[int, str] = nicknames,
        ) -> int:
            return await comment_nicknames.repair_nicknames(session, batch, current, hosted)

        repaired += await on_physical_shard(services, physical, fix)
        if len(comments) < REPAIR_BATCH:
            return repaired


async def prune_logs(services: Services) -> int:
    """Delete logs every shard has applied. Skipped while any shard cannot say how far it is."""
    offsets = [await shard_offsets(services, physical) for physical in range(len(services.databases.shards))]
    heads = await queue_heads(services)
    pruned = 0
    async with services.databases.main_session() as session:
        for queue in heads:
            floor = min(shard.get(queue, 0) for shard in offsets)
            result = await session.execute(
                delete(NicknameLog).where(col(NicknameLog.queue_id) == queue, col(NicknameLog.id) < floor)
            )
            pruned += int(result.rowcount)  # type: ignore[attr-defined]
        await session.commit()
    return pruned
