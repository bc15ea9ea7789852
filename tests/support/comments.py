"""Direct looks at the shard databases, for assertions the public API cannot make."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, text
from sqlmodel import col

from mediagraph.db.comments import Comment
from mediagraph.db.comments.paths import encode_segment
from mediagraph.ids import decode_id, decode_ids
from mediagraph.services import Services


def raw_media_id(global_id: str) -> int:
    return decode_id(global_id, "Media")


def raw_comment_ref(global_id: str) -> tuple[int, int]:
    media_id, comment_id = decode_ids(global_id, "Comment", 2)
    return media_id, comment_id


def physical_of(services: Services, media_id: int) -> int:
    return services.databases.router.physical_shard(media_id)


async def stored_comments(services: Services, media_id: int, *, physical: int | None = None) -> list[Comment]:
    shard = physical_of(services, media_id) if physical is None else physical
    async with services.databases.shard_session(shard) as session:
        rows = await session.scalars(
            select(Comment).where(col(Comment.media_id) == media_id).order_by(col(Comment.path))
        )
        return list(rows)


async def stored_comment(services: Services, global_id: str) -> Comment | None:
    media_id, comment_id = raw_comment_ref(global_id)
    async with services.databases.shard_session(physical_of(services, media_id)) as session:
        return await session.get(Comment, (media_id, comment_id))


async def shard_execute(services: Services, physical: int, sql: str, **params: Any) -> Any:
    async with services.databases.shard_session(physical) as session:
        result = await session.execute(text(sql), params)
        await session.commit()
        return result


async def seed_root_comments(services: Services, *, media_id: int, writer_id: int, nickname: str, count: int) -> None:
    """Many root comments at once, straight into the shard (for sizes the API would take long to build)."""
    router = services.databases.router
    rows = [
        {
            "media_id": media_id,
            "id": services.ids.next_id(),
            "logical_shard": router.logical_shard(media_id),
            "path": encode_segment(n),
            "writer_id": writer_id,
            "writer_nickname": nickname,
            "content": f"seeded {n}",
        }
        for n in range(count)
    ]
    async with services.databases.shard_session(physical_of(services, media_id)) as session:
        await session.execute(
            text(
                "INSERT INTO comments (media_id, id, logical_shard, path, writer_id, writer_nickname, confirmed, "
                "content, created_at) VALUES (:media_id, :id, :logical_shard, :path, :writer_id, :writer_nickname, "
                "true, :content, now())"
            ),
            rows,
        )
        await session.execute(
            text(
                "INSERT INTO comment_counts (media_id, logical_shard, comment_count) VALUES (:m, :l, :n) "
                "ON CONFLICT (media_id) DO UPDATE SET comment_count = comment_counts.comment_count + :n"
            ),
            {"m": media_id, "l": router.logical_shard(media_id), "n": count},
        )
        await session.commit()
