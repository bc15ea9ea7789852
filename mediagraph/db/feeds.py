"""Follows and their counts, posts, and the outbox of feed events still owed to Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    String,
    UniqueConstraint,
    case,
    func,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased
from sqlmodel import Field, col

from mediagraph.db.base import MainTable, snowflake_key, timestamp
from mediagraph.db.users import User

POST_MAX_CHARACTERS = 300


class Follow(MainTable, table=True):
    __tablename__ = "follows"
    __table_args__ = (
        UniqueConstraint("follower_id", "followee_id"),
        # Followers of a user, newest first (connections, fan-out in chunks).
        Index("ix_follows_followee_id_id", "followee_id", "id"),
        # Whom a user follows, newest first.
        Index("ix_follows_follower_id_id", "follower_id", "id"),
        CheckConstraint("follower_id <> followee_id", name="not_self"),
    )

    id: int = snowflake_key()  # type: ignore[assignment]
    follower_id: int = Field(sa_column=Column(BigInteger, ForeignKey("users.id", ondelete="CASCADE"), nullable=False))
    followee_id: int = Field(sa_column=Column(BigInteger, ForeignKey("users.id", ondelete="CASCADE"), nullable=False))
    created_at: datetime = timestamp()  # type: ignore[assignment]


class FollowCount(MainTable, table=True):
    """Kept in the same transaction as every follow and unfollow, so it never drifts."""

    __tablename__ = "follow_counts"
    __table_args__ = (
        CheckConstraint("follower_count >= 0", name="follower_count_not_negative"),
        CheckConstraint("following_count >= 0", name="following_count_not_negative"),
    )

    user_id: int = Field(
        sa_column=Column(BigInteger, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, autoincrement=False)
    )
    follower_count: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    following_count: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))
    # The newest of this author's posts that fan-out skipped (the author was a celebrity then).
    # Readers merge such an author's recent posts whatever the follower count is now, so a
    # post is not lost when its author drops below the threshold before it is read.
    last_skipped_post_id: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))


class Post(MainTable, table=True):
    __tablename__ = "posts"
    __table_args__ = (
        # Keyset paging over one author or many: WHERE author_id = ? AND id < ? ORDER BY id DESC.
        Index("ix_posts_author_id_id", "author_id", "id"),
        # Deleting media nulls the reference; without an index that is a scan of every post.
        Index("ix_posts_media_id", "media_id", postgresql_where="media_id IS NOT NULL"),
    )

    # A snowflake: sorting by id is sorting by creation time.
    id: int = snowflake_key()  # type: ignore[assignment]
    author_id: int = Field(sa_column=Column(BigInteger, ForeignKey("users.id", ondelete="CASCADE"), nullable=False))
    # VARCHAR(n) counts characters, not bytes, as the post limit does.
    text: str = Field(sa_column=Column(String(POST_MAX_CHARACTERS), nullable=False))
    media_id: int | None = Field(
        default=None, sa_column=Column(BigInteger, ForeignKey("media.id", ondelete="SET NULL"), nullable=True)
    )
    created_at: datetime = timestamp()  # type: ignore[assignment]


class FeedEventKind(Enum):
    POST_CREATED = "post_created"
    POST_DELETED = "post_deleted"
    FOLLOWED = "followed"
    UNFOLLOWED = "unfollowed"


class FeedOutbox(MainTable, table=True):
    """Feed events written with the change they describe and removed once Redis has them.

    A row left behind means Redis was unreachable: the fan-out worker replays it, so
    caches that survive the outage catch up instead of silently missing the change.
    """

    __tablename__ = "feed_outbox"

    id: int = snowflake_key()  # type: ignore[assignment]
    kind: str = Field(sa_column=Column(String(16), nullable=False))
    # The author of a post, or the follower of a follow.
    user_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    # The post, or the followed user.
    subject_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    created_at: datetime = timestamp()  # type: ignore[assignment]


# Queries shared by the resolvers and the fan-out worker.

# The seed reads a following list in chunks of 100 once it reaches 1,000.
CHUNKED_FROM = 1_000
CHUNK_SIZE = 100


async def follow_counts(session: AsyncSession, user_id: int) -> tuple[int, int]:
    """(followers, following) of one user."""
    row = await session.get(FollowCount, user_id)
    return (row.follower_count, row.following_count) if row is not None else (0, 0)


async def adjust_follow_counts(session: AsyncSession, *, follower_id: int, followee_id: int, delta: int) -> None:
    """Moves both counters; each statement locks the two rows in id order, so crossing follows cannot deadlock."""
    if delta < 0:
        # Unfollowing: the follow that is being removed created both rows.
        counts = FollowCount.__table__.c  # type: ignore[attr-defined]
        await session.execute(
            update(FollowCount)
            .where(col(FollowCount.user_id).in_([follower_id, followee_id]))
            .values(
                follower_count=counts.follower_count + case((counts.user_id == followee_id, delta), else_=0),
                following_count=counts.following_count + case((counts.user_id == follower_id, delta), else_=0),
            )
        )
        return
    rows = sorted(
        [
            {"user_id": followee_id, "follower_count": delta, "following_count": 0},
            {"user_id": follower_id, "follower_count": 0, "following_count": delta},
        ],
        key=lambda row: row["user_id"],
    )
    statement = insert(FollowCount).values(rows)
    await session.execute(
        statement.on_conflict_do_update(
            index_elements=["user_id"],
            set_={
                "follower_count": FollowCount.__table__.c.follower_count + statement.excluded.follower_count,  # type: ignore[attr-defined]
                "following_count": FollowCount.__table__.c.following_count + statement.excluded.following_count,  # type: ignore[attr-defined]
            },
        )
    )


async def followee_chunks(
    session: AsyncSession,
    follower_id: int,
    *,
    following: int | None = None,
    min_followers: int = 0,
    skipped_since: int | None = None,
) -> AsyncIterator[list[int]]:
    """Whom `follower_id` follows: all in one read, or in chunks of 100 once there are 1,000
    or more, as the seed reads them.

    With `min_followers`, only those with that many followers, and (with `skipped_since`)
    those whose fan-out skipped a post at or after that id. `following` is how many there
    are, if known; if not, a first read of up to 1,000 tells.
    """
    after = 0
    filters = _FolloweeFilter(min_followers, skipped_since)
    if following is None:
        first = await _followees(session, follower_id, after=0, limit=CHUNKED_FROM, only=filters)
        if len(first) < CHUNKED_FROM:
            if first:
                yield first
            return
        for start in range(0, len(first), CHUNK_SIZE):
            yield first[start : start + CHUNK_SIZE]
        after = first[-1]
    elif following < CHUNKED_FROM:
        everyone = await _followees(session, follower_id, after=0, limit=None, only=filters)
        if everyone:
            yield everyone
        return
    while True:
        chunk = await _followees(session, follower_id, after=after, limit=CHUNK_SIZE, only=filters)
        if chunk:
            yield chunk
        if len(chunk) < CHUNK_SIZE:
            return
        after = chunk[-1]


@dataclass(frozen=True)
class _FolloweeFilter:
    min_followers: int
    skipped_since: int | None


async def _followees(
    session: AsyncSession, follower_id: int, *, after: int, limit: int | None, only: _FolloweeFilter
) -> list[int]:
    query = select(col(Follow.followee_id)).where(
        col(Follow.follower_id) == follower_id, col(Follow.followee_id) > after
    )
    if only.min_followers > 0:
        chosen = col(FollowCount.follower_count) >= only.min_followers
        if only.skipped_since is not None:
            chosen = or_(chosen, col(FollowCount.last_skipped_post_id) >= only.skipped_since)
        query = query.join(FollowCount, col(FollowCount.user_id) == col(Follow.followee_id)).where(chosen)
    query = query.order_by(col(Follow.followee_id))
    return list((await session.execute(query if limit is None else query.limit(limit))).scalars())


async def record_skipped_fanout(session: AsyncSession, *, author_id: int, post_id: int) -> None:
    """Notes that fan-out skipped `post_id`: readers merge its author's posts from now on (see
    `FollowCount.last_skipped_post_id`). Only ever moves forward, so retries change nothing."""
    skipped = col(FollowCount.last_skipped_post_id)
    await session.execute(
        update(FollowCount)
        .where(col(FollowCount.user_id) == author_id)
        .values(last_skipped_post_id=func.greatest(func.coalesce(skipped, 0), post_id))
    )


async def follower_chunks(session: AsyncSession, followee_id: int, *, size: int) -> AsyncIterator[list[int]]:
    after = 0
    while True:
        rows = (
            await session.execute(
                select(col(Follow.id), col(Follow.follower_id))
                .where(col(Follow.followee_id) == followee_id, col(Follow.id) > after)
                .order_by(col(Follow.id))
                .limit(size)
            )
        ).all()
        if rows:
            yield [follower for _, follower in rows]
        if len(rows) < size:
            return
        after = rows[-1][0]


async def recent_posts(
    session: AsyncSession, author_ids: list[int], *, since: int = 0, until: int | None = None, limit: int
) -> list[tuple[int, int]]:
    """(post id, author id) of the newest posts of these authors in [since, until), newest first."""
    query = select(col(Post.id), col(Post.author_id)).where(col(Post.author_id).in_(author_ids), col(Post.id) >= since)
    if until is not None:
        query = query.where(col(Post.id) < until)
    rows = await session.execute(query.order_by(col(Post.id).desc()).limit(limit))
    return [(post_id, author_id) for post_id, author_id in rows.all()]


async def followed_posts(session: AsyncSession, viewer_id: int, post_ids: list[int]) -> list[tuple[Post, User]]:
    """Those of `post_ids` that still exist and whose author the viewer still follows, with the author."""
    rows = await session.execute(
        select(Post, User)
        .join(Follow, col(Follow.followee_id) == col(Post.author_id))
        .join(User, col(User.id) == col(Post.author_id))
        .where(col(Follow.follower_id) == viewer_id, col(Post.id).in_(post_ids))
    )
    return [(post, author) for post, author in rows.all()]


async def older_followed_posts(
    session: AsyncSession, viewer_id: int, *, before: int | None, limit: int
) -> list[tuple[Post, User]]:
    """The viewer's news feed straight from PostgreSQL: keyset on post id over every followee.

    Each followee contributes at most `limit` rows through the (author_id, id) index, so a
    page costs the same however long the followees' histories are.
    """
    per_author = select(Post).where(col(Post.author_id) == col(Follow.followee_id))
    if before is not None:
        per_author = per_author.where(col(Post.id) < before)
    latest = aliased(Post, per_author.order_by(col(Post.id).desc()).limit(limit).lateral("latest"))
    query = (
        select(latest, User)
        .select_from(Follow)
        .join(latest, true())
        .join(User, col(User.id) == col(Follow.followee_id))
        .where(col(Follow.follower_id) == viewer_id)
        .order_by(col(latest.id).desc())
        .limit(limit)
    )
    return [(post, author) for post, author in (await session.execute(query)).all()]


async def newer_followed_posts(
    session: AsyncSession, viewer_id: int, *, after: int, limit: int
) -> list[tuple[Post, User]]:
    """The news feed's posts just above `after`, oldest first: backward pages, from PostgreSQL alone
    (the cache only helps the way readers usually go)."""
    per_author = select(Post).where(col(Post.author_id) == col(Follow.followee_id), col(Post.id) > after)
    earliest = aliased(Post, per_author.order_by(col(Post.id)).limit(limit).lateral("earliest"))
    query = (
        select(earliest, User)
        .select_from(Follow)
        .join(earliest, true())
        .join(User, col(User.id) == col(Follow.followee_id))
        .where(col(Follow.follower_id) == viewer_id)
        .order_by(col(earliest.id))
        .limit(limit)
    )
    return [(post, author) for post, author in (await session.execute(query)).all()]


async def newer_author_posts(session: AsyncSession, author_id: int, *, after: int, limit: int) -> list[Post]:
    """An author's posts just above `after`, oldest first: backward pages of the newest-first listing."""
    query = select(Post).where(col(Post.author_id) == author_id, col(Post.id) > after)
    rows = await session.execute(query.order_by(col(Post.id)).limit(limit))
    return list(rows.scalars())


async def older_author_posts(session: AsyncSession, author_id: int, *, before: int | None, limit: int) -> list[Post]:
    query = select(Post).where(col(Post.author_id) == author_id)
    if before is not None:
        query = query.where(col(Post.id) < before)
    rows = await session.execute(query.order_by(col(Post.id).desc()).limit(limit))
    return list(rows.scalars())


# Which of some users a user follows (asyncpg: follower id, followee ids).
FOLLOWED_BY_USER = "SELECT followee_id FROM follows WHERE follower_id = $1 AND followee_id = ANY($2)"
