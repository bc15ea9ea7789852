"""Views and likes: a view counted once per viewer per media per window, likes counted exactly."""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from redis.asyncio.client import Pipeline
from redis.exceptions import RedisError

from mediagraph.context import Context
from mediagraph.dataloaders.base import Loader
from mediagraph.dataloaders.views import (
    LikeCountByMediaIdLoader,
    LikedByViewerLoader,
    ViewCountByMediaIdLoader,
    view_buffer,
)
from mediagraph.db.media import Media
from mediagraph.db.views import likes
from mediagraph.db.writes import PerPool, StepWrites, WritePool
from mediagraph.errors import NotFound, ServiceUnavailable, Unauthenticated
from mediagraph.events import EngagementEvent, EngagementKind, queue_engagement
from mediagraph.keys.views import Counted
from mediagraph.lua import run_together
from mediagraph.resolvers.media import media_by_id, media_record_by_id, require_media
from mediagraph.services import Services
from mediagraph.subscriptions import media as media_live
from mediagraph.subscriptions import views as live

log = logging.getLogger(__name__)


@dataclass
class RecordedView:
    counted: bool
    # The media's plain row (`media_record_by_id`): a view's answer builds no model instance.
    media: Mapping[str, Any]


def viewer_key(context: Context) -> str:
    """Who is viewing: the user when logged in, else a hash of client address and user agent."""
    viewer_id = context.viewer_id
    if viewer_id is not None:
        return f"u{viewer_id}"
    agent = context.request.headers.get("user-agent", "") if context.request is not None else ""
    digest = hashlib.sha256(f"{context.client_address}\n{agent}".encode()).hexdigest()[:32]
    return f"a{digest}"


async def record_view(context: Context, *, media_id: int) -> RecordedView:
    media = await media_record_by_id(context, media_id)
    if media is None:
        raise NotFound("No such media.")
    services = context.services
    try:
        outcome = await view_buffer(services).count_view(
            media_id,
            viewer_key(context),
            dedupe_seconds=context.settings.view_dedupe_seconds,
            push_hold_ms=live.push_hold_ms(services),
        )
    except (RedisError, OSError) as error:
        log.warning("a view could not be counted: %r", error)
        raise ServiceUnavailable("Views cannot be counted right now; try again shortly.") from None
    if outcome is Counted.YES_AND_ANNOUNCE:
        live.in_background(live.announce_while_counting(services, media_id))
    _forget(context, ViewCountByMediaIdLoader, media_id)
    return RecordedView(counted=outcome is not Counted.ALREADY_SEEN, media=media)


async def view_count(context: Context, media_id: int) -> int:
    return await context.loader(ViewCountByMediaIdLoader).load(media_id)


async def like_count(context: Context, media_id: int) -> int:
    return await context.loader(LikeCountByMediaIdLoader).load(media_id)


async def viewer_has_liked(context: Context, media_id: int) -> bool:
    return await context.loader(LikedByViewerLoader).load(media_id)


async def like_media(context: Context, *, media_id: int) -> Mapping[str, Any]:
    """The media's row after the like, as `media_record_by_id` gives it."""
    return await _change_like(context, media_id, like=True)


async def unlike_media(context: Context, *, media_id: int) -> Mapping[str, Any]:
    """The media's row after the like was taken back."""
    return await _change_like(context, media_id, like=False)


async def _change_like(context: Context, media_id: int, *, like: bool) -> Mapping[str, Any]:
    # The token's user is checked against its row (revocation, deletion) by the statement itself.
    viewer_id = context.require_viewer_id()
    claims = context.claims
    assert claims is not None
    services = context.services
    request = likes.LikeRequest(media_id=media_id, user_id=viewer_id, token_version=claims.token_version)
    try:
        change = await like_batches(services.databases.main_writes).change(services, request, like=like)
    except likes.StaleToken:
        raise Unauthenticated("The access token is no longer valid.") from None
    except likes.MissingMedia:
        raise NotFound("No such media.") from None
    _forget(context, LikeCountByMediaIdLoader, media_id)
    _forget(context, LikedByViewerLoader, media_id)
    return change.media


class LikeBatches:
    """The likes and unlikes of one moment: one statement and commit (`likes.write_changes`), then
    the hot-media events and live-count notices of those that changed a row, in one Redis round
    trip, before any of them is answered.

    Sent by the batch rather than by each request once answered, the notices wait for no turn of
    the loop after the commit, and each request is resumed once instead of twice."""

    def __init__(self, writes: WritePool) -> None:
        self.writes = writes
        self._steps: StepWrites[tuple[Services, likes.LikeRequest, bool], likes.LikeChange] = StepWrites(self._run)

    async def change(self, services: Services, request: likes.LikeRequest, *, like: bool) -> likes.LikeChange:
        return await self._steps.ask((services, request, like))

    async def _run(self, asks: list[tuple[Services, likes.LikeRequest, bool]]) -> list[likes.LikeChange | Exception]:
        results = await likes.write_changes(self.writes, [(request, like) for _, request, like in asks])
        moved = [
            (request.media_id, 1 if like else -1)
            for (_, request, like), result in zip(asks, results, strict=True)
            if isinstance(result, likes.LikeChange) and result.changed
        ]
        if moved:
            # A write pool is one application's: its asks all carry the same services.
            await _announce_like_changes(asks[0][0], moved)
        return results


# The process's like batches on a pool.
like_batches = PerPool(LikeBatches)


async def _announce_like_changes(services: Services, changes: list[tuple[int, int]]) -> None:
    """The hot-media score's events and the live counts' notices of committed like changes (media, ±1)."""

    def build(pipe: Pipeline) -> None:
        for media_id, delta in changes:
            queue_engagement(pipe, services.keys, EngagementEvent(EngagementKind.LIKE, media_id, delta))
            media_live.queue_counts_changed(pipe, services, media_id)

    try:
        replies = await run_together(services.redis, build)
    except (RedisError, OSError) as error:
        # The likes are committed; only the hot-media scores and live counts miss them.
        log.warning("like events for %d media not published: %s", len(changes), error)
        return
    failed = [reply for reply in replies if isinstance(reply, Exception)]
    if failed:
        log.warning("like events for %d media not all published: %s", len(changes), failed[0])


def _forget(context: Context, loader: type[Loader[int, Any]], media_id: int) -> None:
    """Drop a value this operation may have loaded before the change (a later field reloads it)."""
    loaded = context.loaded(loader)
    if loaded is not None:
        with contextlib.suppress(KeyError):
            loaded.clear(media_id)


async def view_count_updates(context: Context, *, media_id: int) -> AsyncIterator[tuple[Media, int]]:
    """The media as it is now with its live view count, now and on every change of the count."""
    media = await require_media(context, media_id)
    async for count in live.view_count_updates(context.services, media_id):
        # The push carries the media itself, so clients' caches take it in as it is now: its row
        # is read afresh (the previous push's loads were forgotten), and `viewCount` is the count
        # announced rather than a second read that may already have moved past it.
        media = await media_by_id(context, media_id) or media
        context.loader(ViewCountByMediaIdLoader).prime(media_id, count)
        yield media, count
