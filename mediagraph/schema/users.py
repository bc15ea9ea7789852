from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import strawberry
from strawberry.types import Info

from mediagraph.context import Context
from mediagraph.db.users import User as UserRow
from mediagraph.ids import to_global_id
from mediagraph.keys.playback import Entity
from mediagraph.resolvers import media as media_resolvers
from mediagraph.resolvers import users as resolvers
from mediagraph.resolvers.comments import threads as comment_reads
from mediagraph.resolvers.feeds import follows as follow_resolvers
from mediagraph.resolvers.feeds import posts as post_resolvers
from mediagraph.schema.extensions import VIEWER_DEPENDENT
from mediagraph.schema.playback import LiveChannelViewers, PlaybackStats, live_viewers_of_channel
from mediagraph.schema.relay import (
    MEDIA_RECORDS_CONNECTION,
    BuiltByName,
    Node,
    register_builder,
    register_node,
    requested,
    selects,
)
from mediagraph.schema.scalars import Count

if TYPE_CHECKING:
    from mediagraph.schema.comments import CommentConnection
    from mediagraph.schema.feeds import FollowConnection, PostConnection
    from mediagraph.schema.media import MediaConnection

# Built by their own modules, which import this one (see `schema/relay.py`).
media_connection: BuiltByName[MediaConnection] = BuiltByName("MediaConnection")
media_records_connection: BuiltByName[MediaConnection] = BuiltByName(MEDIA_RECORDS_CONNECTION)
post_connection: BuiltByName[PostConnection] = BuiltByName("PostConnection")
follow_connection: BuiltByName[FollowConnection] = BuiltByName("FollowConnection")
comment_connection: BuiltByName[CommentConnection] = BuiltByName("CommentConnection")

MediaConnectionRef = Annotated["MediaConnection", strawberry.lazy("mediagraph.schema.media")]
PostConnectionRef = Annotated["PostConnection", strawberry.lazy("mediagraph.schema.feeds")]
FollowConnectionRef = Annotated["FollowConnection", strawberry.lazy("mediagraph.schema.feeds")]
CommentConnectionRef = Annotated["CommentConnection", strawberry.lazy("mediagraph.schema.comments")]


@strawberry.type
class User(Node):
    raw_id: strawberry.Private[int]
    username: str
    nickname: str
    created_at: datetime

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> User:
        """As `from_row`, from a plain row (the asyncpg read path), with no ORM instance on the way."""
        user_id = record["id"]
        return cls(
            id=strawberry.ID(to_global_id("User", user_id)),
            raw_id=user_id,
            username=record["username"],
            nickname=record["nickname"],
            created_at=record["created_at"],
        )

    @classmethod
    def from_row(cls, row: UserRow) -> User:
        return cls(
            id=strawberry.ID(to_global_id("User", row.id)),
            raw_id=row.id,
            username=row.username,
            nickname=row.nickname,
            created_at=row.created_at,
        )

    @strawberry.field(description="Media this user uploaded, newest first.")
    async def media(
        self,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> MediaConnectionRef:
        request = requested(info.context.settings, first=first, after=after, last=last, before=before)
        views = selects(info, "edges", "node", "viewCount")
        page = await media_resolvers.media_by_owner(info.context, owner_id=self.raw_id, request=request, views=views)
        return media_records_connection(page)

    @strawberry.field(
        description="Media this user bookmarked, newest bookmark first. Null, with a FORBIDDEN error (UNAUTHENTICATED "
        "when logged out), unless the viewer is this user.",
        metadata=VIEWER_DEPENDENT,
    )
    async def bookmarks(
        self,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> MediaConnectionRef | None:
        request = requested(info.context.settings, first=first, after=after, last=last, before=before)
        page = await media_resolvers.bookmarks(info.context, user_id=self.raw_id, request=request)
        return media_connection(page)

    @strawberry.field(description="This user's posts, newest first.")
    async def posts(
        self,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> PostConnectionRef:
        request = requested(info.context.settings, first=first, after=after, last=last, before=before)
        page = await post_resolvers.author_posts(info.context, author_id=self.raw_id, request=request)
        return post_connection(page)

    @strawberry.field(description="Who follows this user, most recent follow first.")
    async def followers(
        self,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> FollowConnectionRef:
        request = requested(info.context.settings, first=first, after=after, last=last, before=before)
        page = await follow_resolvers.followers(info.context, user_id=self.raw_id, request=request)
        return follow_connection((page, self.raw_id, True))

    @strawberry.field(description="Whom this user follows, most recent follow first.")
    async def following(
        self,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> FollowConnectionRef:
        request = requested(info.context.settings, first=first, after=after, last=last, before=before)
        page = await follow_resolvers.following(info.context, user_id=self.raw_id, request=request)
        return follow_connection((page, self.raw_id, False))

    @strawberry.field
    async def follower_count(self, info: Info[Context, None]) -> Count:
        return (await follow_resolvers.follow_counts(info.context, self.raw_id)).followers

    @strawberry.field
    async def following_count(self, info: Info[Context, None]) -> Count:
        return (await follow_resolvers.follow_counts(info.context, self.raw_id)).following

    @strawberry.field(
        description="Whether the logged-in viewer follows this user (false when logged out).",
        metadata=VIEWER_DEPENDENT,
    )
    async def viewer_follows(self, info: Info[Context, None]) -> bool:
        return await follow_resolvers.viewer_follows(info.context, self.raw_id)

    @strawberry.field(description="Playback statistics of everything this user uploaded (the channel).")
    def channel_stats(self) -> PlaybackStats:
        return PlaybackStats.of(Entity.of_channel(self.raw_id))

    @strawberry.field(
        description="Concurrent viewers of everything this user uploaded, the object `liveChannelViewersUpdated` "
        "pushes. Null, with a SERVICE_UNAVAILABLE error, while the live store is unreachable."
    )
    async def live_channel_viewers(self, info: Info[Context, None]) -> LiveChannelViewers | None:
        return await live_viewers_of_channel(info.context, self.raw_id)

    @strawberry.field(
        description="This user's comments on any media, newest first (deleted ones excluded). "
        "Null, with a SERVICE_UNAVAILABLE error, while a shard is down."
    )
    async def comments(
        self,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> CommentConnectionRef | None:
        request = requested(info.context.settings, first=first, after=after, last=last, before=before)
        page = await comment_reads.writer_comments(info.context, writer_id=self.raw_id, request=request)
        return comment_connection(page)


def user_or_none(row: UserRow | None) -> User | None:
    return User.from_row(row) if row is not None else None


async def _fetch_user(context: Context, raw_id: int) -> User | None:
    return user_or_none(await resolvers.user_by_id(context, raw_id))


register_node("User", _fetch_user)
register_builder("User", User.from_row)


@strawberry.type
class AuthPayload:
    token: str = strawberry.field(description="A JWT access token: send it as `Authorization: Bearer <token>`.")
    user: User


@strawberry.type
class UserQueries:
    @strawberry.field(description="The logged-in user, or null.")
    async def me(self, info: Info[Context, None]) -> User | None:
        return user_or_none(await resolvers.me(info.context))

    @strawberry.field(description="The user with this username; null when there is none.")
    async def user(self, info: Info[Context, None], username: str) -> User | None:
        return user_or_none(await resolvers.user_by_username(info.context, username))


@strawberry.type
class UserMutations:
    @strawberry.mutation
    async def register(
        self, info: Info[Context, None], username: str, password: str, nickname: str | None = None
    ) -> AuthPayload:
        session = await resolvers.register(info.context, username=username, password=password, nickname=nickname)
        return AuthPayload(token=session.token, user=User.from_row(session.user))

    @strawberry.mutation
    async def login(self, info: Info[Context, None], username: str, password: str) -> AuthPayload:
        session = await resolvers.login(info.context, username=username, password=password)
        return AuthPayload(token=session.token, user=User.from_row(session.user))

    @strawberry.mutation(description="Change the viewer's nickname; allowed once every 24 hours.")
    async def change_nickname(self, info: Info[Context, None], nickname: str) -> User:
        return User.from_row(await resolvers.change_nickname(info.context, nickname=nickname))
