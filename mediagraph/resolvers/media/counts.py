"""Live counts of a list of media: `mediaCounts` pushes a media whenever its views, likes or comments move.

A notice says which media may have moved; their counts are read afresh through the
operation's loaders and a media is pushed only if they differ from what was last pushed.
The values read are primed into the loaders right before the push, so the pushed
media's `viewCount`, `likeCount` and `commentCount` resolve without reading again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from mediagraph.context import Context
from mediagraph.dataloaders.comments import ThreadWindowByMediaLoader
from mediagraph.dataloaders.media import MediaByIdLoader
from mediagraph.dataloaders.views import LikeCountByMediaIdLoader, ViewCountByMediaIdLoader
from mediagraph.db.comments.store import ThreadWindow
from mediagraph.db.media import Media
from mediagraph.errors import BadUserInput, NotFound
from mediagraph.ids import decode_id, to_global_id
from mediagraph.subscriptions import media as live

# One subscription watches at most this many media: a page of a list, a dashboard's top.
MAX_WATCHED_MEDIA = 100
# The thread window that carries only a media's comment count (what `commentCount` loads).
COUNT_ONLY = (0, "")


@dataclass(frozen=True)
class Counts:
    views: int
    likes: int
    # None while the media's comment shard cannot answer.
    comments: int | None
    window: ThreadWindow | None = field(compare=False)


def watched_media_ids(global_ids: Sequence[str]) -> list[int]:
    """The media a `mediaCounts` subscription names, each once, in order; bounded."""
    if not global_ids:
        raise BadUserInput("Name at least one media.", argument="mediaIds")
    if len(global_ids) > MAX_WATCHED_MEDIA:
        raise BadUserInput(f"At most {MAX_WATCHED_MEDIA} media per subscription.", argument="mediaIds")
    return list(dict.fromkeys(decode_id(global_id, "Media") for global_id in global_ids))


async def media_count_changes(context: Context, media_ids: list[int]) -> AsyncIterator[Media]:
    """Each media with its current counts at once, then again whenever they change."""
    rows = await context.loader(MediaByIdLoader).load_many(media_ids)
    missing = [to_global_id("Media", media_id) for media_id, row in zip(media_ids, rows, strict=True) if row is None]
    if missing:
        raise NotFound(f"No such media: {', '.join(missing)}.", argument="mediaIds")
    pushed: dict[int, Counts] = {}
    notices = contextlib.aclosing(live.count_notices(context.services, media_ids))
    async with notices as fired_media:
        async for fired in fired_media:
            # Whatever an earlier round loaded is stale by now.
            context.forget_loaded()
            moved = [media_id for media_id in media_ids if media_id in fired]
            if not moved:
                continue
            current = await _read_counts(context, moved)
            rows = await context.loader(MediaByIdLoader).load_many(moved)
            for media_id, row in zip(moved, rows, strict=True):
                counts = current[media_id]
                if row is None or pushed.get(media_id) == counts:
                    # Deleted since, or nothing this media shows has changed.
                    continue
                pushed[media_id] = counts
                _prime(context, row, counts)
                yield row


async def _read_counts(context: Context, media_ids: list[int]) -> dict[int, Counts]:
    windows = context.loader(ThreadWindowByMediaLoader)
    views: list[int]
    likes: list[int]
    thread_windows: list[ThreadWindow | BaseException]
    views, likes, thread_windows = await asyncio.gather(
        context.loader(ViewCountByMediaIdLoader).load_many(media_ids),
        context.loader(LikeCountByMediaIdLoader).load_many(media_ids),
        asyncio.gather(*(windows.load((media_id, *COUNT_ONLY)) for media_id in media_ids), return_exceptions=True),
    )
    counts = {}
    for media_id, view_count, like_count, window in zip(media_ids, views, likes, thread_windows, strict=True):
        # A comment shard that is down nulls only `commentCount`, as it does in a query.
        readable = window if isinstance(window, ThreadWindow) else None
        comments = readable.count if readable is not None else None
        counts[media_id] = Counts(view_count, like_count, comments, readable)
    return counts


def _prime(context: Context, row: Media, counts: Counts) -> None:
    """Hand the pushed media's fields what was just read: one read per change, not two."""
    context.loader(MediaByIdLoader).prime(row.id, row)
    context.loader(ViewCountByMediaIdLoader).prime(row.id, counts.views)
    context.loader(LikeCountByMediaIdLoader).prime(row.id, counts.likes)
    if counts.window is not None:
        context.loader(ThreadWindowByMediaLoader).prime((row.id, *COUNT_ONLY), counts.window)
