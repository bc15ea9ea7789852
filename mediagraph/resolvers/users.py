"""Accounts: registration, login, profiles, nickname changes."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from mediagraph import ratelimit, security, validation
from mediagraph.context import Context
from mediagraph.dataloaders.users import UserByIdLoader, UserByUsernameLoader
from mediagraph.db.base import utcnow
from mediagraph.db.nicknames import append_nickname_log
from mediagraph.db.users import User
from mediagraph.errors import Conflict, RateLimited, Unauthenticated
from mediagraph.keys.users import login_attempts_by_address, login_attempts_by_username


@dataclass
class Session:
    token: str
    user: User


def _session_for(context: Context, user: User) -> Session:
    token = security.issue_token(context.settings, user_id=user.id, role=user.role, token_version=user.token_version)
    return Session(token=token, user=user)


async def register(context: Context, *, username: str, password: str, nickname: str | None) -> Session:
    name = validation.username(username)
    secret = validation.password(password)
    shown = validation.nickname(nickname if nickname is not None else name)
    user = User(
        id=context.services.ids.next_id(),
        username=name,
        nickname=shown,
        # Argon2 is deliberately slow: hashing in a thread keeps other requests moving.
        password_hash=await asyncio.to_thread(security.hash_password, secret),
    )
    async with context.db.use() as session:
        session.add(user)
        try:
            await session.commit()
        except IntegrityError:
            raise Conflict("That username is taken.", argument="username") from None
    return _session_for(context, user)


async def login(context: Context, *, username: str, password: str) -> Session:
    settings = context.settings
    redis = context.services.redis
    name = username.strip().lower()[:64]
    by_name = login_attempts_by_username(context.services.keys, name)
    by_address = login_attempts_by_address(context.services.keys, context.client_address)
    window = settings.login_window_seconds
    # Both limits count every attempt, so guessing one account from many
    # addresses and many accounts from one address are both slowed down.
    await ratelimit.hit(redis, by_address, limit=settings.login_attempts_per_address, window_seconds=window)
    await ratelimit.hit(redis, by_name, limit=settings.login_attempts_per_username, window_seconds=window)
    async with context.db.use() as session:
        user = (await session.execute(select(User).where(col(User.username) == name))).scalar_one_or_none()
    verified = await asyncio.to_thread(security.verify_password, user.password_hash if user else None, password)
    if not verified or user is None:
        raise Unauthenticated("Wrong username or password.")
    await ratelimit.reset(redis, by_name)
    return _session_for(context, user)


async def user_by_id(context: Context, user_id: int) -> User | None:
    return await context.loader(UserByIdLoader).load(user_id)


async def user_rows_by_ids(context: Context, user_ids: Sequence[int]) -> dict[int, Mapping[str, Any]]:
    """Users' plain rows by id (an unknown id is left out), as fresh as `user_by_id`'s, in one read at most."""
    return await context.loader(UserByIdLoader).records(user_ids)


async def user_by_username(context: Context, username: str) -> User | None:
    name = username.strip().lower()
    if not validation.USERNAME.fullmatch(name):
        return None
    return await context.loader(UserByUsernameLoader).load(name)


async def me(context: Context) -> User | None:
    if context.viewer_id is None:
        return None
    return await context.require_viewer()


async def change_nickname(context: Context, *, nickname: str) -> User:
    viewer = await context.require_viewer()
    new_nickname = validation.nickname(nickname)
    interval = timedelta(hours=context.settings.nickname_change_interval_hours)
    async with context.db.use() as session:
        # The row lock serialises two concurrent changes by the same user, so
        # the once-per-interval rule cannot be raced.
        user = (await session.execute(select(User).where(col(User.id) == viewer.id).with_for_update())).scalar_one()
        now = utcnow()
        if user.nickname_changed_at is not None and now - user.nickname_changed_at < interval:
            retry_after = int((user.nickname_changed_at + interval - now).total_seconds()) + 1
            await session.rollback()
            raise RateLimited("The nickname can be changed once a day.", retry_after=retry_after)
        if user.nickname != new_nickname:
            user.nickname = new_nickname
            user.nickname_changed_at = now
            # Same transaction: the change and its log commit together or not at all,
            # and the replay worker copies it onto the comments on every shard.
            await append_nickname_log(session, context.settings, user_id=user.id, nickname=new_nickname)
        await session.commit()
    context.loader(UserByIdLoader).clear(viewer.id)
    return user
