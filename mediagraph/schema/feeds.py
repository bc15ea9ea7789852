from __future__ import annotations

from collections.abc import AsyncGenerator
from datetime import datetime

import strawberry
from strawberry.types import Info

from mediagraph.context import Context
from mediagraph.db.feeds import Post as PostRow
from mediagraph.db.users import User as UserRow
from mediagraph.ids import decode_id, to_global_id
from mediagraph.resolvers import feeds as resolvers
from mediagraph.resolvers.feeds import follows as follow_resolvers
from mediagraph.resolvers.feeds import posts as post_resolvers
from mediagraph.resolvers.media import media_by_id
from mediagraph.resolvers.pagination import Page
from mediagraph.resolvers.users import user_by_id
from mediagraph.schema.media import Media
from mediagraph.schema.relay import Edge, Node, PageInfo, register_builder, register_node, requested
from mediagraph.schema.scalars import Count
from mediagraph.schema.users import User


@strawberry.type(description="A short text post (at most 300 characters), optionally with attached media.")
class Post(Node):
    raw_id: strawberry.Private[int]
    author_id: strawberry.Private[int]
    media_id: strawberry.Private[int | None]
    text: str
    created_at: datetime

    @classmethod
    def from_row(cls, row: PostRow) -> Post:
        return cls(
            id=strawberry.ID(to_global_id("Post", row.id)),
            raw_id=row.id,
            author_id=row.author_id,
            media_id=row.media_id,
            text=row.text,
            created_at=row.created_at,
        )

    @strawberry.field
    async def author(self, info: Info[Context, None]) -> User:
        row = await user_by_id(info.context, self.author_id)
        if row is None:
            raise RuntimeError(f"post {self.raw_id} has no author row")
        return User.from_row(row)

    @strawberry.field(description="The attached media; null if none was attached or it was deleted.")
    async def media(self, info: Info[Context, None]) -> Media | None:
        if self.media_id is None:
            return None
        row = await media_by_id(info.context, self.media_id)
        return Media.from_row(row) if row is not None else None


async def _fetch_post(context: Context, raw_id: int) -> Post | None:
    row = await post_resolvers.post_by_id(context, raw_id)
    return Post.from_row(row) if row is not None else None


register_node("Post", _fetch_post)


@strawberry.type
class PostConnection:
    edges: list[Edge[Post]]
    page_info: PageInfo

    @classmethod
    def from_page(cls, page: Page[PostRow]) -> PostConnection:
        return cls(
            edges=[Edge(cursor=cursor, node=Post.from_row(row)) for cursor, row in page.items],
            page_info=PageInfo.of(page),
        )


@strawberry.type
class FollowEdge:
    cursor: str
    node: User
    followed_at: datetime


@strawberry.type
class FollowConnection:
    edges: list[FollowEdge]
    page_info: PageInfo
    user_raw_id: strawberry.Private[int]
    followers: strawberry.Private[bool]

    @classmethod
    def from_page(cls, source: tuple[Page[tuple[UserRow, datetime]], int, bool]) -> FollowConnection:
        page, user_id, followers = source
        return cls(
            edges=[
                FollowEdge(cursor=cursor, node=User.from_row(user), followed_at=followed_at)
                for cursor, (user, followed_at) in page.items
            ],
            page_info=PageInfo.of(page),
            user_raw_id=user_id,
            followers=followers,
        )

    @strawberry.field(description="How many edges the whole connection has (the user's stored follow counts).")
    async def total_count(self, info: Info[Context, None]) -> Count:
        counts = await follow_resolvers.follow_counts(info.context, self.user_raw_id)
        return counts.followers if self.followers else counts.following


@strawberry.type
class DeletedPost:
    id: strawberry.ID


@strawberry.type(description="A post that just entered the viewer's news feed.")
class NewsfeedUpdate:
    post_id: strawberry.ID
    post: Post


@strawberry.type
class FeedQueries:
    @strawberry.field(description="The post with this id; null when there is none (deleted, or never was).")
    async def post(self, info: Info[Context, None], id: strawberry.ID) -> Post | None:
        return await _fetch_post(info.context, decode_id(id, "Post"))

    @strawberry.field(
        description="Posts of the users the viewer follows, newest first (10 a page unless asked otherwise); "
        "scrolls back to their first post, and backward (`last`/`before`) to newer ones."
    )
    async def newsfeed(
        self,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> PostConnection:
        request = requested(
            info.context.settings,
            first=first,
            after=after,
            last=last,
            before=before,
            default=resolvers.NEWSFEED_PAGE_SIZE,
        )
        return PostConnection.from_page(await resolvers.newsfeed_page(info.context, request=request))


@strawberry.type
class FeedMutations:
    @strawberry.mutation(description="Follow a user; following someone already followed changes nothing.")
    async def follow(self, info: Info[Context, None], user_id: strawberry.ID) -> User:
        return User.from_row(await follow_resolvers.follow(info.context, user_id=decode_id(user_id, "User")))

    @strawberry.mutation(description="Stop following a user; unfollowing someone not followed changes nothing.")
    async def unfollow(self, info: Info[Context, None], user_id: strawberry.ID) -> User:
        return User.from_row(await follow_resolvers.unfollow(info.context, user_id=decode_id(user_id, "User")))

    @strawberry.mutation(description="Post up to 300 characters, optionally attaching media.")
    async def create_post(self, info: Info[Context, None], text: str, media_id: strawberry.ID | None = None) -> Post:
        media = decode_id(media_id, "Media") if media_id is not None else None
        return Post.from_row(await post_resolvers.create_post(info.context, text=text, media_id=media))

    @strawberry.mutation(description="Delete one of the viewer's posts; it leaves every feed.")
    async def delete_post(self, info: Info[Context, None], id: strawberry.ID) -> DeletedPost:
        await post_resolvers.delete_post(info.context, post_id=decode_id(id, "Post"))
        return DeletedPost(id=id)


@strawberry.type
class FeedSubscriptions:
    @strawberry.subscription(description="Posts as they enter the viewer's news feed (log in first).")
    async def newsfeed_updated(self, info: Info[Context, None]) -> AsyncGenerator[NewsfeedUpdate, None]:
        async for row in resolvers.newsfeed_updates(info.context):
            post = Post.from_row(row)
            yield NewsfeedUpdate(post_id=post.id, post=post)


register_builder("PostConnection", PostConnection.from_page)
register_builder("FollowConnection", FollowConnection.from_page)
