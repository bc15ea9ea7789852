from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import strawberry
from asyncpg import Record
from strawberry.file_uploads import Upload
from strawberry.types import Info

from mediagraph.context import Context
from mediagraph.dataloaders.media import BookmarkedByViewerLoader
from mediagraph.db.media import Media as MediaRow
from mediagraph.db.media import MediaCounts
from mediagraph.ids import decode_id, to_global_id
from mediagraph.keys.playback import Entity
from mediagraph.resolvers import comments as comment_resolvers
from mediagraph.resolvers import media as resolvers
from mediagraph.resolvers import users as user_resolvers
from mediagraph.resolvers import views as view_resolvers
from mediagraph.resolvers.comments import threads as comment_reads
from mediagraph.resolvers.media import TagMatch
from mediagraph.resolvers.media import counts as count_resolvers
from mediagraph.resolvers.pagination import Page
from mediagraph.resolvers.views.pagination import MediaSort, ranked_media_list
from mediagraph.schema.extensions import ORIGIN_DEPENDENT, SHARED_STATE, VIEWER_DEPENDENT, prefetched
from mediagraph.schema.playback import LiveViewers, PlaybackStats, live_viewers_of_media
from mediagraph.schema.relay import (
    MEDIA_RECORDS_CONNECTION,
    BuiltByName,
    Edge,
    Node,
    PageInfo,
    register_builder,
    register_node,
    requested,
    selects,
)
from mediagraph.schema.scalars import Count
from mediagraph.schema.users import User

if TYPE_CHECKING:
    from mediagraph.schema.comments import CommentConnection, CommentPage

# Built by their own module, which imports this one (see `schema/relay.py`).
comment_connection: BuiltByName[CommentConnection] = BuiltByName("CommentConnection")
comment_page: BuiltByName[CommentPage] = BuiltByName("CommentPage")

CommentConnectionRef = Annotated["CommentConnection", strawberry.lazy("mediagraph.schema.comments")]
CommentPageRef = Annotated["CommentPage", strawberry.lazy("mediagraph.schema.comments")]

TagMatchEnum = strawberry.enum(
    TagMatch, name="TagMatch", description="Whether media must carry ALL the tags or ANY of them."
)
MediaSortEnum = strawberry.enum(
    MediaSort,
    name="MediaSort",
    description="NEWEST first, or most VIEWS / LIKES first (those report `omitted` items as counts move).",
)


@strawberry.type
class Media(Node):
    raw_id: strawberry.Private[int]
    owner_id: strawberry.Private[int]
    title: str
    description: str
    tags: list[str]
    content_type: str
    filename: str
    size_bytes: Count = strawberry.field(description="Size in bytes.")
    created_at: datetime
    updated_at: datetime
    # Counts read with the row (a page reads them for all its rows at once); None: load them.
    known_view_count: strawberry.Private[int | None] = None
    known_like_count: strawberry.Private[int | None] = None
    # The uploader, when a page read its items' uploaders at once; None: load it.
    known_uploader: strawberry.Private[User | None] = None

    @classmethod
    def from_row(cls, row: MediaRow, counts: MediaCounts | None = None) -> Media:
        return cls(
            id=strawberry.ID(to_global_id("Media", row.id)),
            raw_id=row.id,
            owner_id=row.owner_id,
            title=row.title,
            description=row.description,
            tags=list(row.tags),
            content_type=row.content_type,
            filename=row.filename,
            size_bytes=row.size_bytes,
            created_at=row.created_at,
            updated_at=row.updated_at,
            known_view_count=counts.views if counts is not None else None,
            known_like_count=counts.likes if counts is not None else None,
        )

    @classmethod
    def from_record(cls, record: Mapping[str, Any], counts: MediaCounts | None = None) -> Media:
        """As `from_row`, from a row of the asyncpg read path, with no ORM instance built on the way."""
        media_id = record["id"]
        return cls(
            id=strawberry.ID(to_global_id("Media", media_id)),
            raw_id=media_id,
            owner_id=record["owner_id"],
            title=record["title"],
            description=record["description"],
            tags=record["tags"],
            content_type=record["content_type"],
            filename=record["filename"],
            size_bytes=record["size_bytes"],
            created_at=record["created_at"],
            updated_at=record["updated_at"],
            known_view_count=counts.views if counts is not None else None,
            known_like_count=counts.likes if counts is not None else None,
        )

    @strawberry.field(
        description="The absolute URL to download the content from, with HTTP Range requests (a `<video>` can "
        "seek). It starts with the server's MEDIAGRAPH_PUBLIC_URL, or else the origin the request came to.",
        metadata=ORIGIN_DEPENDENT,
    )
    def content_url(self, info: Info[Context, None]) -> str:
        return f"{info.context.public_origin}/media/{self.raw_id}/content"

    @strawberry.field(metadata=prefetched("known_uploader"))
    async def uploader(self, info: Info[Context, None]) -> User:
        if self.known_uploader is not None:
            return self.known_uploader
        row = await user_resolvers.user_by_id(info.context, self.owner_id)
        if row is None:
            raise RuntimeError(f"media {self.raw_id} has no uploader row")
        return User.from_row(row)

    @strawberry.field(metadata=VIEWER_DEPENDENT)
    async def viewer_has_bookmarked(self, info: Info[Context, None]) -> bool:
        return await info.context.loader(BookmarkedByViewerLoader).load(self.raw_id)

    # Plain values when read with the row; otherwise the loader's awaitable (the executor
    # awaits what a resolver returns), so a page's items cost no coroutine each.
    @strawberry.field(
        description="Views counted so far, including those not yet flushed to the database.",
        graphql_type=Count,
        metadata=prefetched("known_view_count"),
    )
    def view_count(self, info: Info[Context, None]) -> int | Awaitable[int]:
        known = self.known_view_count
        return known if known is not None else view_resolvers.view_count(info.context, self.raw_id)

    @strawberry.field(graphql_type=Count, metadata=prefetched("known_like_count"))
    def like_count(self, info: Info[Context, None]) -> int | Awaitable[int]:
        known = self.known_like_count
        return known if known is not None else view_resolvers.like_count(info.context, self.raw_id)

    @strawberry.field(metadata=VIEWER_DEPENDENT)
    async def viewer_has_liked(self, info: Info[Context, None]) -> bool:
        return await view_resolvers.viewer_has_liked(info.context, self.raw_id)

    @strawberry.field(description="Playback statistics of this media (the stream); as `playbackStats(mediaId:)`.")
    def playback_stats(self) -> PlaybackStats:
        return PlaybackStats.of(Entity.stream(self.raw_id, self.owner_id))

    @strawberry.field(
        description="Its concurrent viewers, the object `liveViewersUpdated` pushes. Null, with a "
        "SERVICE_UNAVAILABLE error, while the live store is unreachable."
    )
    async def live_viewers(self, info: Info[Context, None]) -> LiveViewers | None:
        return await live_viewers_of_media(info.context, self.raw_id)

    # The comment fields are nullable: when the media's shard is down they alone come back
    # null with a SERVICE_UNAVAILABLE error, and the rest of the response still arrives.
    @strawberry.field(
        description="Comments on this media that are not deleted, replies included. Null, with a SERVICE_UNAVAILABLE "
        "error, while its comment shard is down."
    )
    async def comment_count(self, info: Info[Context, None]) -> Count | None:
        return await comment_resolvers.comment_count(info.context, media_id=self.raw_id)

    @strawberry.field(
        description="The comment thread in thread order (replies under their parent, oldest first), both ways. "
        "Null, with a SERVICE_UNAVAILABLE error, while its comment shard is down."
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
        page = await comment_reads.thread(info.context, media_id=self.raw_id, request=request)
        return comment_connection(page)

    @strawberry.field(
        description="The thread by page number (1-based), for numbered page navigation. Null, with a "
        "SERVICE_UNAVAILABLE error, while its comment shard is down."
    )
    async def comment_page(
        self, info: Info[Context, None], page: int = 1, size: int | None = None
    ) -> CommentPageRef | None:
        result = await comment_reads.numbered_page(info.context, media_id=self.raw_id, page=page, size=size)
        return comment_page(result)


def shows_view_counts(info: Info[Context, None]) -> bool:
    """Whether a media connection's selection shows `viewCount` (its items' or omitted ones')."""
    return selects(info, "edges", "node", "viewCount") or selects(info, "omitted", "viewCount")


async def users_of(context: Context, user_ids: set[int]) -> dict[int, User]:
    """The users with these ids, built once each (one batched read; a missing one is left out)."""
    rows = await user_resolvers.user_rows_by_ids(context, sorted(user_ids))
    return {user_id: User.from_record(row) for user_id, row in rows.items()}


def media_or_none(row: MediaRow | None) -> Media | None:
    return Media.from_row(row) if row is not None else None


async def _fetch_media(context: Context, raw_id: int) -> Media | None:
    return media_or_none(await resolvers.media_by_id(context, raw_id))


register_node("Media", _fetch_media)
register_builder("Media", Media.from_row)


RANKED_FORWARD_ONLY = (
    "mediaList by VIEWS or LIKES pages forward only (`first`/`after`): counts move while you page, so its "
    "pagination session serves each media once, going forward, and reports in `omitted` those that moved above "
    "the cursor; a page backward would serve them again. Sort by NEWEST to page both ways."
)


@strawberry.type
class MediaConnection:
    edges: list[Edge[Media]]
    page_info: PageInfo
    omitted: list[Media] = strawberry.field(
        description="VIEWS and LIKES sorts: media that moved above the cursor since the previous page and "
        "were never served in this pagination session (paging on would have skipped them). Each is "
        "delivered once: over a session every media appears exactly once, in a page or here."
    )

    @classmethod
    def from_page(cls, page: Page[MediaRow]) -> MediaConnection:
        """A page of model instances (bookmarks)."""
        counts = page.counts
        return cls(
            edges=[Edge(cursor=cursor, node=Media.from_row(row, counts.get(row.id))) for cursor, row in page.items],
            page_info=PageInfo.of(page),
            omitted=[Media.from_row(row, counts.get(row.id)) for row in page.omitted],
        )

    @classmethod
    def from_records(cls, page: Page[Record], uploaders: dict[int, User] | None = None) -> MediaConnection:
        """A page read as plain rows (the lists): no ORM instance per item; `uploaders` by id, if read."""
        counts = page.counts
        known = uploaders or {}

        def build(row: Record) -> Media:
            media = Media.from_record(row, counts.get(row["id"]))
            media.known_uploader = known.get(row["owner_id"])
            return media

        return cls(
            edges=[Edge(cursor=cursor, node=build(row)) for cursor, row in page.items],
            page_info=PageInfo.of(page),
            omitted=[build(row) for row in page.omitted],
        )


@strawberry.type
class DeletedMedia:
    id: strawberry.ID


@strawberry.type
class MediaQueries:
    @strawberry.field(description="The media with this id; null when there is none (deleted, or never was).")
    async def media(self, info: Info[Context, None], id: strawberry.ID) -> Media | None:
        # Built from the plain row: the loader's batching and a model instance would cost
        # this, the most asked field, as much again as the rest of the request (BENCHMARKS.md).
        record = await resolvers.media_record_by_id(info.context, decode_id(id, "Media"))
        return Media.from_record(record) if record is not None else None

    @strawberry.field(
        description="Media, newest first or by views or likes, optionally filtered by tags. NEWEST pages both "
        "ways; VIEWS and LIKES page forward only (`last`/`before` are refused with BAD_USER_INPUT)."
    )
    async def media_list(
        self,
        info: Info[Context, None],
        tags: list[str] | None = None,
        tag_match: TagMatchEnum = TagMatch.ALL,  # type: ignore[valid-type]
        sort: MediaSortEnum = MediaSort.NEWEST,  # type: ignore[valid-type]
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> MediaConnection:
        settings = info.context.settings
        views = shows_view_counts(info)
        if sort is MediaSort.NEWEST:
            request = requested(settings, first=first, after=after, last=last, before=before)
            page = await resolvers.media_list(
                info.context, tags=tags, tag_match=tag_match, request=request, views=views
            )
        else:
            requested(settings, first=first, after=after, last=last, before=before, forward_only=RANKED_FORWARD_ONLY)
            page = await ranked_media_list(
                info.context, sort=sort, tags=tags, tag_match=tag_match, first=first, after=after, views=views
            )
            page.has_previous_page = after is not None
        uploaders = None
        if selects(info, "edges", "node", "uploader") or selects(info, "omitted", "uploader"):
            # One batched read for the page instead of a resolver call per item.
            rows = [row for _, row in page.items] + page.omitted
            uploaders = await users_of(info.context, {row["owner_id"] for row in rows})
        return MediaConnection.from_records(page, uploaders)


@strawberry.type
class MediaMutations:
    @strawberry.mutation(description="Upload a file (GraphQL multipart request) with its title and tags.")
    async def upload_media(
        self,
        info: Info[Context, None],
        file: Upload,
        title: str,
        description: str | None = None,
        tags: list[str] | None = None,
    ) -> Media:
        row = await resolvers.upload_media(info.context, file=file, title=title, description=description, tags=tags)  # type: ignore[arg-type]
        return Media.from_row(row)

    @strawberry.mutation
    async def update_media(
        self,
        info: Info[Context, None],
        id: strawberry.ID,
        title: str | None = None,
        description: str | None = None,
        tags: list[str] | None = None,
    ) -> Media:
        row = await resolvers.update_media(
            info.context, media_id=decode_id(id, "Media"), title=title, description=description, tags=tags
        )
        return Media.from_row(row)

    @strawberry.mutation
    async def delete_media(self, info: Info[Context, None], id: strawberry.ID) -> DeletedMedia:
        await resolvers.delete_media(info.context, media_id=decode_id(id, "Media"))
        return DeletedMedia(id=id)

    @strawberry.mutation(description="Bookmark a media; bookmarking it again changes nothing.")
    async def bookmark_media(self, info: Info[Context, None], media_id: strawberry.ID) -> Media:
        return Media.from_row(await resolvers.bookmark(info.context, media_id=decode_id(media_id, "Media")))

    @strawberry.mutation(description="Take back a bookmark; nothing happens if there was none.")
    async def unbookmark_media(self, info: Info[Context, None], media_id: strawberry.ID) -> Media:
        return Media.from_row(await resolvers.unbookmark(info.context, media_id=decode_id(media_id, "Media")))

    @strawberry.mutation(
        description="Bookmark a media.",
        deprecation_reason="Renamed `bookmarkMedia`, the pair of `unbookmarkMedia` as `likeMedia` is of `unlikeMedia`.",
    )
    async def bookmark(self, info: Info[Context, None], media_id: strawberry.ID) -> Media:
        return Media.from_row(await resolvers.bookmark(info.context, media_id=decode_id(media_id, "Media")))

    @strawberry.mutation(
        description="Take back a bookmark.",
        deprecation_reason="Renamed `unbookmarkMedia`, the pair of `bookmarkMedia`.",
    )
    async def unbookmark(self, info: Info[Context, None], media_id: strawberry.ID) -> Media:
        return Media.from_row(await resolvers.unbookmark(info.context, media_id=decode_id(media_id, "Media")))


@strawberry.type
class MediaSubscriptions:
    @strawberry.subscription(description="Media as it is uploaded, optionally only media carrying ANY of `tags`.")
    async def media_uploaded(
        self, info: Info[Context, None], tags: list[str] | None = None
    ) -> AsyncGenerator[Media, None]:
        async for row in resolvers.uploaded_media(info.context, tags=tags):
            yield Media.from_row(row)

    @strawberry.subscription(
        metadata=SHARED_STATE,
        description=(
            "Each of the media (at most 100) with its current counts at once, then again whenever its "
            "viewCount, likeCount or commentCount changes: a few times a second at most, ending on the latest."
        ),
    )
    async def media_counts(
        self, info: Info[Context, None], media_ids: list[strawberry.ID]
    ) -> AsyncGenerator[Media, None]:
        watched = count_resolvers.watched_media_ids(media_ids)
        async for row in count_resolvers.media_count_changes(info.context, watched):
            yield Media.from_row(row)


register_builder("MediaConnection", MediaConnection.from_page)
register_builder(MEDIA_RECORDS_CONNECTION, MediaConnection.from_records)
