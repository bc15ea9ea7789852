"""Comments: threads by path enumeration on the shards, with the writer's nickname stored on each.

Creating a comment takes four steps (the seed's): 1. read the writer's nickname from the
main database, 2. insert the comment with it, 3. read the nickname again, 4. fix the
comment if it changed and mark it confirmed. A nickname change committed between 1 and
2 whose replay ran before 2 would otherwise leave the comment with the old nickname
for good; step 3 happens after 2, so it sees that change. Each step is its own function
so tests can interleave them with nickname changes and replays.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from redis.exceptions import RedisError
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from mediagraph import validation
from mediagraph.context import Context
from mediagraph.dataloaders.comments import CommentByIdLoader, ThreadWindowByMediaLoader
from mediagraph.db.base import utcnow
from mediagraph.db.comments import MAX_DEPTH, Comment
from mediagraph.db.comments import store as comment_store
from mediagraph.db.comments.paths import LevelFull, next_child_path
from mediagraph.db.comments.store import COMMENT_COLUMNS
from mediagraph.db.shards.residency import on_logical_shard
from mediagraph.db.users import User
from mediagraph.errors import BadUserInput, Conflict, Forbidden, NotFound, ServiceUnavailable
from mediagraph.events import EngagementEvent, EngagementKind, publish_engagement
from mediagraph.keys.comments import comment_added_channel
from mediagraph.resolvers.media import require_media
from mediagraph.services import Services
from mediagraph.subscriptions import media as media_live

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommentDraft:
    media_id: int
    parent_id: int | None
    writer_id: int
    content: str


@dataclass(frozen=True)
class Deletion:
    comment: Comment
    # False: the comment still has replies, so it stays, marked deleted.
    removed: bool


async def read_writer_nickname(context: Context, writer_id: int) -> str:
    """Steps 1 and 3: the writer's nickname as the main database has it now (never a cached row)."""
    async with context.db.use() as session:
        nickname = await session.scalar(select(col(User.nickname)).where(col(User.id) == writer_id))
    if nickname is None:
        raise NotFound("No such user.")
    return nickname


async def insert_comment(context: Context, draft: CommentDraft, *, nickname: str) -> Comment:
    """Step 2: allocate the next sibling path under the parent and insert, unconfirmed."""
    services = context.services
    router = services.databases.router

    async def work(session: AsyncSession) -> Comment:
        logical = router.logical_shard(draft.media_id)
        await comment_store.lock_counter(session, media_id=draft.media_id, logical_shard=logical, delta=1)
        parent_path = ""
        if draft.parent_id is not None:
            parent = await comment_store.get_comment(session, media_id=draft.media_id, comment_id=draft.parent_id)
            parent_path = _reply_path(parent)
        top = await comment_store.descendants_top_path(session, media_id=draft.media_id, parent_path=parent_path)
        try:
            path = next_child_path(parent_path, top)
        except LevelFull:
            argument = "mediaId" if draft.parent_id is None else "parentId"
            raise Conflict("This thread level is full: no more comments fit here.", argument=argument) from None
        comment = Comment(
            media_id=draft.media_id,
            # Drawn under the counter lock, so ids follow path order among siblings.
            id=services.ids.next_id(),
            logical_shard=logical,
            path=path,
            parent_id=draft.parent_id,
            writer_id=draft.writer_id,
            writer_nickname=nickname,
            confirmed=False,
            content=draft.content,
            deleted=False,
            created_at=utcnow(),
        )
        await comment_store.insert_comment(session, comment)
        return comment

    return await on_logical_shard(services, draft.media_id, work)


def _reply_path(parent: Comment | None) -> str:
    if parent is None:
        raise NotFound("No such parent comment on this media.", argument="parentId")
    if parent.deleted:
        raise BadUserInput("You cannot reply to a deleted comment.", argument="parentId")
    if parent.depth >= MAX_DEPTH:
        raise BadUserInput(f"Replies may nest at most {MAX_DEPTH} levels deep.", argument="parentId")
    return parent.path


async def confirm_comment(context: Context, comment: Comment, *, inserted: str, current: str) -> Comment:
    """Step 4: correct the nickname if step 3 found it changed, and mark the comment confirmed."""

    async def work(session: AsyncSession) -> str | None:
        return await comment_store.confirm_nickname(
            session, media_id=comment.media_id, comment_id=comment.id, inserted=inserted, current=current
        )

    stored = await on_logical_shard(context.services, comment.media_id, work)
    comment.confirmed = stored is not None
    if stored is not None:
        comment.writer_nickname = stored
    return comment


async def add_comment(context: Context, *, media_id: int, parent_id: int | None, content: str) -> Comment:
    viewer = await context.require_viewer()  # step 1: the nickname comes with the viewer's row
    text = validation.clean_text(
        content, argument="content", max_length=context.settings.comment_max_length, multiline=True
    )
    await require_media(context, media_id)
    services = context.services
    draft = CommentDraft(media_id=media_id, parent_id=parent_id, writer_id=viewer.id, content=text)
    comment = await insert_comment(context, draft, nickname=viewer.nickname)
    try:
        current = await read_writer_nickname(context, viewer.id)
        comment = await confirm_comment(context, comment, inserted=viewer.nickname, current=current)
    except ServiceUnavailable:
        # The comment is stored; answering with an error would invite a duplicate retry.
        # It stays unconfirmed until the repair pass re-checks its nickname.
        log.warning("comment %s on media %s left unconfirmed for the repair pass", comment.id, media_id)
    await _announce(services, EngagementEvent(EngagementKind.COMMENT, media_id, 1))
    with contextlib.suppress(RedisError, OSError):
        await services.bus.publish(comment_added_channel(services.keys, media_id), comment_payload(comment))
    return comment


async def delete_comment(context: Context, *, media_id: int, comment_id: int) -> Deletion:
    viewer = await context.require_viewer()
    services = context.services
    logical = services.databases.router.logical_shard(media_id)

    async def work(session: AsyncSession) -> Deletion:
        # Every successful delete takes one live comment away; an error rolls this back.
        await comment_store.lock_counter(session, media_id=media_id, logical_shard=logical, delta=-1)
        comment = await comment_store.get_comment(session, media_id=media_id, comment_id=comment_id)
        if comment is None or comment.deleted:
            raise NotFound("No such comment.")
        if comment.writer_id != viewer.id:
            raise Forbidden("Only the writer may delete this comment.")
        removed = await comment_store.remove_comment(session, comment)
        comment.deleted = True
        return Deletion(comment=comment, removed=removed)

    deletion = await on_logical_shard(services, media_id, work)
    await _announce(services, EngagementEvent(EngagementKind.COMMENT, media_id, -1))
    return deletion


async def _announce(services: Services, event: EngagementEvent) -> None:
    # The comment is committed either way; hot media and live counts just miss one event
    # if Redis is away.
    try:
        await publish_engagement(services.redis, services.keys, event)
        await media_live.counts_changed(services, event.media_id)
    except (RedisError, OSError) as error:
        log.warning("engagement event lost: %s", error)


async def comment_by_ref(context: Context, *, media_id: int, comment_id: int) -> Comment | None:
    return await context.loader(CommentByIdLoader).load((media_id, comment_id))


async def comment_count(context: Context, *, media_id: int) -> int:
    window = await context.loader(ThreadWindowByMediaLoader).load((media_id, 0, ""))
    return window.count


async def comments_added(context: Context, *, media_id: int) -> AsyncIterator[Comment]:
    await require_media(context, media_id)
    services = context.services
    async with services.bus.subscribe(comment_added_channel(services.keys, media_id)) as events:
        async for payload in events:
            yield comment_from_payload(payload)


def comment_payload(comment: Comment) -> dict[str, Any]:
    """The whole comment travels with the event, so subscribers need no database read."""
    payload = {name: getattr(comment, name) for name in COMMENT_COLUMNS}
    payload["created_at"] = comment.created_at.isoformat()
    return payload


def comment_from_payload(payload: dict[str, Any]) -> Comment:
    fields = {name: payload[name] for name in COMMENT_COLUMNS}
    fields["created_at"] = datetime.fromisoformat(payload["created_at"])
    return Comment(**fields)
