"""SQL on one shard session that keeps writers' nicknames on comments current (replay, resync, repair).

Updates are limited to the logical shards the caller has fenced (`hosted`): rows of
other logical shards on this database are leftovers of a move, awaiting deletion.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from mediagraph.db.comments import Comment


async def apply_nicknames(session: AsyncSession, nicknames: Mapping[int, str], hosted: Iterable[int]) -> int:
    """Set writers' nicknames on every comment of the hosted logical shards; returns rows changed."""
    if not nicknames:
        return 0
    result = await session.execute(
        text(
            "UPDATE comments AS c SET writer_nickname = v.nickname, revision = nextval('comment_revision_seq') "
            "FROM unnest(CAST(:writers AS bigint[]), CAST(:nicknames AS text[])) AS v(writer_id, nickname) "
            "WHERE c.writer_id = v.writer_id AND c.writer_nickname <> v.nickname "
            "AND c.logical_shard = ANY(CAST(:hosted AS integer[]))"
        ),
        {"writers": list(nicknames), "nicknames": list(nicknames.values()), "hosted": sorted(hosted)},
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


async def unconfirmed(session: AsyncSession, *, below_id: int, limit: int) -> list[Comment]:
    rows = await session.scalars(
        select(Comment)
        .where(~col(Comment.confirmed), col(Comment.id) < below_id)
        .order_by(col(Comment.id))
        .limit(limit)
    )
    return list(rows)


async def repair_nicknames(
    session: AsyncSession, comments: Sequence[Comment], nicknames: Mapping[int, str], hosted: Iterable[int]
) -> int:
    """Finish creations that crashed before step 4: the same compare-and-set, from the nickname seen."""
    if not comments:
        return 0
    result = await session.execute(
        text(
            "UPDATE comments AS c SET confirmed = true, revision = nextval('comment_revision_seq'), "
            "writer_nickname = CASE WHEN c.writer_nickname = v.seen THEN v.current ELSE c.writer_nickname END "
            "FROM unnest(CAST(:media_ids AS bigint[]), CAST(:ids AS bigint[]), CAST(:seen AS text[]), "
            "CAST(:current AS text[])) AS v(media_id, id, seen, current) "
            "WHERE c.media_id = v.media_id AND c.id = v.id AND NOT c.confirmed "
            "AND c.logical_shard = ANY(CAST(:hosted AS integer[]))"
        ),
        {
            "media_ids": [comment.media_id for comment in comments],
            "ids": [comment.id for comment in comments],
            "seen": [comment.writer_nickname for comment in comments],
            "current": [nicknames.get(comment.writer_id, comment.writer_nickname) for comment in comments],
            "hosted": sorted(hosted),
        },
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


async def jump_offset(session: AsyncSession, queue: int, head: int, *, before: int) -> None:
    """Set the shard's offset in `queue` to `head`, unless it moved from `before` meanwhile."""
    await session.execute(
        text(
            "INSERT INTO nickname_offsets (queue_id, applied_offset) VALUES (:queue, :head) "
            "ON CONFLICT (queue_id) DO UPDATE SET applied_offset = :head "
            "WHERE nickname_offsets.applied_offset = :before"
        ),
        {"queue": queue, "head": head, "before": before},
    )
