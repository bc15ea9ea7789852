from __future__ import annotations

from collections.abc import AsyncGenerator
from datetime import datetime

import strawberry
from strawberry.types import Info

from mediagraph.context import Context
from mediagraph.db.comments import Comment as CommentRow
from mediagraph.errors import BadUserInput
from mediagraph.ids import decode_id, decode_ids, to_global_id
from mediagraph.resolvers import comments as resolvers
from mediagraph.resolvers import media as media_resolvers
from mediagraph.resolvers import users as user_resolvers
from mediagraph.resolvers.comments import threads as comment_reads
from mediagraph.resolvers.comments.threads import NumberedPage
from mediagraph.resolvers.pagination import Page
from mediagraph.schema.media import Media, media_or_none
from mediagraph.schema.relay import Edge, Node, PageInfo, register_builder, register_node
from mediagraph.schema.users import User, user_or_none


@strawberry.type(description="A comment on a media; replies nest up to 5 levels.")
class Comment(Node):
    raw_id: strawberry.Private[int]
    media_raw_id: strawberry.Private[int]
    parent_raw_id: strawberry.Private[int | None]
    writer_raw_id: strawberry.Private[int]
    depth: int = strawberry.field(description="1 for a comment on the media, 2 for a reply to it, and so on.")
    deleted: bool = strawberry.field(description="Deleted while replies remain: shown without content or writer.")
    content: str | None = strawberry.field(description="Null once deleted.")
    writer_nickname: str | None = strawberry.field(description="The writer's current nickname; null once deleted.")
    created_at: datetime

    @classmethod
    def from_row(cls, row: CommentRow) -> Comment:
        return cls(
            id=strawberry.ID(comment_global_id(row)),
            raw_id=row.id,
            media_raw_id=row.media_id,
            parent_raw_id=row.parent_id,
            writer_raw_id=row.writer_id,
            depth=row.depth,
            deleted=row.deleted,
            content=None if row.deleted else row.content,
            writer_nickname=None if row.deleted else row.writer_nickname,
            created_at=row.created_at,
        )

    @strawberry.field(description="The media commented on; null if it was deleted.")
    async def media(self, info: Info[Context, None]) -> Media | None:
        return media_or_none(await media_resolvers.media_by_id(info.context, self.media_raw_id))

    @strawberry.field(description="Who wrote it; null once deleted.")
    async def writer(self, info: Info[Context, None]) -> User | None:
        if self.deleted:
            return None
        return user_or_none(await user_resolvers.user_by_id(info.context, self.writer_raw_id))

    @strawberry.field(description="The comment this one replies to; null for a comment on the media.")
    async def parent(self, info: Info[Context, None]) -> Comment | None:
        if self.parent_raw_id is None:
            return None
        row = await resolvers.comment_by_ref(info.context, media_id=self.media_raw_id, comment_id=self.parent_raw_id)
        return comment_or_none(row)


def comment_global_id(row: CommentRow) -> str:
    # The media id rides along: it names the shard, and the comment's key is (media id, id).
    return to_global_id("Comment", row.media_id, row.id)


def comment_or_none(row: CommentRow | None) -> Comment | None:
    return Comment.from_row(row) if row is not None else None


async def _fetch_comment(context: Context, media_id: int, comment_id: int) -> Comment | None:
    return comment_or_none(await resolvers.comment_by_ref(context, media_id=media_id, comment_id=comment_id))


register_node("Comment", _fetch_comment, id_parts=2)


@strawberry.type
class CommentConnection:
    edges: list[Edge[Comment]]
    page_info: PageInfo

    @classmethod
    def from_page(cls, page: Page[CommentRow]) -> CommentConnection:
        return cls(
            edges=[Edge(cursor=cursor, node=Comment.from_row(row)) for cursor, row in page.items],
            page_info=PageInfo.of(page),
        )


@strawberry.type(
    description="One page of a thread by page number, with the page buttons to show. Its id names the media, "
    "the page and the page size, so refetching it reads that page again."
)
class CommentPage(Node):
    page: int
    size: int
    comments: list[Comment]
    pages: list[int] = strawberry.field(
        description="Page numbers of the current block of buttons (10 by default) that have comments."
    )
    has_previous_block: bool
    has_next_block: bool = strawberry.field(description="Whether comments continue past this block: a 'next' button.")

    @classmethod
    def from_result(cls, result: NumberedPage) -> CommentPage:
        return cls(
            id=strawberry.ID(to_global_id("CommentPage", result.media_id, result.page, result.size)),
            page=result.page,
            size=result.size,
            comments=[Comment.from_row(row) for row in result.comments],
            pages=result.pages,
            has_previous_block=result.has_previous_block,
            has_next_block=result.has_next_block,
        )


async def _fetch_comment_page(context: Context, media_id: int, page: int, size: int) -> CommentPage | None:
    if await media_resolvers.media_by_id(context, media_id) is None:
        return None
    try:
        return CommentPage.from_result(
            await comment_reads.numbered_page(context, media_id=media_id, page=page, size=size)
        )
    except BadUserInput:
        # A page or size out of range names no page.
        return None


register_node("CommentPage", _fetch_comment_page, id_parts=3)


@strawberry.type
class DeleteCommentPayload:
    id: strawberry.ID
    removed: bool = strawberry.field(description="False when replies remain and the comment is only marked deleted.")
    comment: Comment | None = strawberry.field(description="The comment as it remains; null when removed.")


def decode_comment_id(global_id: str) -> tuple[int, int]:
    media_id, comment_id = decode_ids(global_id, "Comment", 2)
    return media_id, comment_id


async def _create_comment(
    info: Info[Context, None], *, media_id: strawberry.ID, content: str, parent_id: strawberry.ID | None
) -> Comment:
    raw_media_id = decode_id(media_id, "Media")
    raw_parent_id = None
    if parent_id is not None:
        parent_media_id, raw_parent_id = decode_comment_id(parent_id)
        if parent_media_id != raw_media_id:
            raise BadUserInput("The parent comment belongs to another media.", argument="parentId")
    row = await resolvers.add_comment(info.context, media_id=raw_media_id, parent_id=raw_parent_id, content=content)
    return Comment.from_row(row)


@strawberry.type
class CommentMutations:
    @strawberry.mutation(description="Comment on a media, or reply to a comment on it (`parentId`).")
    async def create_comment(
        self, info: Info[Context, None], media_id: strawberry.ID, content: str, parent_id: strawberry.ID | None = None
    ) -> Comment:
        return await _create_comment(info, media_id=media_id, content=content, parent_id=parent_id)

    @strawberry.mutation(
        description="Comment on a media, or reply to a comment on it (`parentId`).",
        deprecation_reason="Renamed `createComment`: things are made with create…, removed with delete….",
    )
    async def add_comment(
        self, info: Info[Context, None], media_id: strawberry.ID, content: str, parent_id: strawberry.ID | None = None
    ) -> Comment:
        return await _create_comment(info, media_id=media_id, content=content, parent_id=parent_id)

    @strawberry.mutation(description="Delete one of your comments; one with replies stays, marked deleted.")
    async def delete_comment(self, info: Info[Context, None], id: strawberry.ID) -> DeleteCommentPayload:
        media_id, comment_id = decode_comment_id(id)
        deletion = await resolvers.delete_comment(info.context, media_id=media_id, comment_id=comment_id)
        return DeleteCommentPayload(
            id=id,
            removed=deletion.removed,
            comment=None if deletion.removed else Comment.from_row(deletion.comment),
        )


@strawberry.type
class CommentSubscriptions:
    @strawberry.subscription(description="Comments and replies as they are added to one media.")
    async def comment_added(self, info: Info[Context, None], media_id: strawberry.ID) -> AsyncGenerator[Comment, None]:
        async for row in resolvers.comments_added(info.context, media_id=decode_id(media_id, "Media")):
            yield Comment.from_row(row)


register_builder("CommentConnection", CommentConnection.from_page)
register_builder("CommentPage", CommentPage.from_result)
