"""Follows: follow, unfollow, followers and following, and their counts."""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from mediagraph.context import Context
from mediagraph.cursors import decode_id_cursor, encode_id_cursor
from mediagraph.dataloaders.feeds import FollowCounts, FollowCountsByUserIdLoader, FollowedByViewerLoader
from mediagraph.dataloaders.users import UserByIdLoader
from mediagraph.db.base import utcnow
from mediagraph.db.feeds import FeedEventKind, Follow, adjust_follow_counts
from mediagraph.db.users import User
from mediagraph.errors import BadUserInput, NotFound
from mediagraph.resolvers.feeds import events as feed_events
from mediagraph.resolvers.pagination import Page, PageRequest, keyset_page
from mediagraph.resolvers.users import user_by_id


async def _followable(context: Context, user_id: int) -> tuple[User, User]:
    viewer = await context.require_viewer()
    if user_id == viewer.id:
        raise BadUserInput("You cannot follow yourself.", argument="userId")
    target = await user_by_id(context, user_id)
    if target is None:
        raise NotFound("No such user.")
    return viewer, target


def _forget_counts(context: Context, *user_ids: int) -> None:
    """Drops what this operation loaded before the change, so the answer shows the new counts."""
    for loader in (context.loader(FollowCountsByUserIdLoader), context.loader(FollowedByViewerLoader)):
        for user_id in user_ids:
            with contextlib.suppress(KeyError):  # never loaded
                loader.clear(user_id)


async def follow(context: Context, *, user_id: int) -> User:
    """Follows `user_id`; following someone already followed changes nothing."""
    viewer, target = await _followable(context, user_id)
    event = None
    async with context.db.use() as session:
        try:
            followed = (
                await session.execute(
                    insert(Follow)
                    .values(
                        id=context.services.ids.next_id(),
                        follower_id=viewer.id,
                        followee_id=user_id,
                        created_at=utcnow(),
                    )
                    .on_conflict_do_nothing(index_elements=["follower_id", "followee_id"])
                    .returning(col(Follow.id))
                )
            ).scalar_one_or_none()
            if followed is not None:
                # Counters move in the same transaction as the row they count.
                await adjust_follow_counts(session, follower_id=viewer.id, followee_id=user_id, delta=1)
                event = feed_events.record(
                    session, context.services, FeedEventKind.FOLLOWED, user_id=viewer.id, subject_id=user_id
                )
            await session.commit()
        except IntegrityError:
            raise NotFound("No such user.") from None
    _forget_counts(context, viewer.id, user_id)
    if event is not None:
        await feed_events.deliver(context.services, event, sessions=context.db.use)
    return target


async def unfollow(context: Context, *, user_id: int) -> User:
    """Stops following `user_id`; unfollowing someone not followed changes nothing."""
    viewer, target = await _followable(context, user_id)
    event = None
    async with context.db.use() as session:
        removed = (
            await session.execute(
                delete(Follow)
                .where(col(Follow.follower_id) == viewer.id, col(Follow.followee_id) == user_id)
                .returning(col(Follow.id))
            )
        ).scalar_one_or_none()
        if removed is not None:
            await adjust_follow_counts(session, follower_id=viewer.id, followee_id=user_id, delta=-1)
            event = feed_events.record(
                session, context.services, FeedEventKind.UNFOLLOWED, user_id=viewer.id, subject_id=user_id
            )
        await session.commit()
    _forget_counts(context, viewer.id, user_id)
    if event is not None:
        await feed_events.deliver(context.services, event, sessions=context.db.use)
    return target


async def follow_counts(context: Context, user_id: int) -> FollowCounts:
    return await context.loader(FollowCountsByUserIdLoader).load(user_id)


async def viewer_follows(context: Context, user_id: int) -> bool:
    return await context.loader(FollowedByViewerLoader).load(user_id)


async def followers(context: Context, *, user_id: int, request: PageRequest) -> Page[tuple[User, datetime]]:
    """Who follows `user_id`, most recent follow first."""
    return await _follow_page(context, user_id=user_id, request=request, kind="followers")


async def following(context: Context, *, user_id: int, request: PageRequest) -> Page[tuple[User, datetime]]:
    """Whom `user_id` follows, most recent follow first."""
    return await _follow_page(context, user_id=user_id, request=request, kind="following")


async def _follow_page(
    context: Context, *, user_id: int, request: PageRequest, kind: str
) -> Page[tuple[User, datetime]]:
    secret = context.settings.secret_key
    cursor_kind = f"follows:{kind}"
    argument = "before" if request.backward else "after"
    cursor_id = decode_id_cursor(secret, cursor_kind, request.cursor, argument=argument)
    if kind == "followers":
        mine, theirs = col(Follow.followee_id), col(Follow.follower_id)
    else:
        mine, theirs = col(Follow.follower_id), col(Follow.followee_id)
    query: Any = (
        select(col(Follow.id), col(Follow.created_at), User).join(User, col(User.id) == theirs).where(mine == user_id)
    )
    if request.backward:
        query = query.where(col(Follow.id) > (cursor_id or 0)).order_by(col(Follow.id))
    else:
        if cursor_id is not None:
            query = query.where(col(Follow.id) < cursor_id)
        query = query.order_by(col(Follow.id).desc())
    async with context.db.use() as session:
        rows = [tuple(row) for row in (await session.execute(query.limit(request.size + 1))).all()]
    users = context.loader(UserByIdLoader)
    for _, _, user in rows:
        users.prime(user.id, user)
    page = keyset_page(request, rows, lambda row: encode_id_cursor(secret, cursor_kind, row[0]))
    return page.map(lambda row: (row[2], row[1]))
