from __future__ import annotations

from collections.abc import AsyncGenerator

import strawberry
from strawberry.types import Info

from mediagraph.context import Context
from mediagraph.ids import decode_id, to_global_id
from mediagraph.resolvers import views as resolvers
from mediagraph.schema.extensions import SHARED_STATE
from mediagraph.schema.media import Media
from mediagraph.schema.scalars import Count


@strawberry.type
class RecordViewPayload:
    counted: bool = strawberry.field(
        description="False when this viewer's view of this media was already counted within the window (10 minutes)."
    )
    media: Media


@strawberry.type(description="A media's live view count, pushed with the media itself so normalized caches update.")
class ViewCountUpdate:
    media_id: strawberry.ID
    view_count: Count
    media: Media = strawberry.field(description="The media as it is now, its `viewCount` the count pushed.")


@strawberry.type
class ViewsMutations:
    @strawberry.mutation(description="Count a view: at most once per viewer (user, or address and agent) per window.")
    async def record_view(self, info: Info[Context, None], media_id: strawberry.ID) -> RecordViewPayload:
        recorded = await resolvers.record_view(info.context, media_id=decode_id(media_id, "Media"))
        return RecordViewPayload(counted=recorded.counted, media=Media.from_record(recorded.media))

    @strawberry.mutation(description="Like a media; liking it again changes nothing.")
    async def like_media(self, info: Info[Context, None], media_id: strawberry.ID) -> Media:
        return Media.from_record(await resolvers.like_media(info.context, media_id=decode_id(media_id, "Media")))

    @strawberry.mutation(description="Take back a like; nothing happens if there was none.")
    async def unlike_media(self, info: Info[Context, None], media_id: strawberry.ID) -> Media:
        return Media.from_record(await resolvers.unlike_media(info.context, media_id=decode_id(media_id, "Media")))


@strawberry.type
class ViewsSubscriptions:
    @strawberry.subscription(
        metadata=SHARED_STATE,
        description="The media's live view count now, then whenever it changes (at most a few times a second).",
    )
    async def view_count(
        self, info: Info[Context, None], media_id: strawberry.ID
    ) -> AsyncGenerator[ViewCountUpdate, None]:
        raw_id = decode_id(media_id, "Media")
        global_id = strawberry.ID(to_global_id("Media", raw_id))
        async for media, count in resolvers.view_count_updates(info.context, media_id=raw_id):
            yield ViewCountUpdate(media_id=global_id, view_count=count, media=Media.from_row(media))
