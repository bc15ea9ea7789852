"""Loaders over the shards: keys grouped by physical shard, one statement per shard, concurrently.

A shard that cannot answer fails only its own keys (SERVICE_UNAVAILABLE); the keys of
the other shards still resolve.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncSession

from mediagraph.dataloaders.base import Loader, LoaderContext
from mediagraph.db.comments import Comment
from mediagraph.db.comments import store as comment_store
from mediagraph.db.comments.store import ThreadWindow, WindowKey
from mediagraph.db.shards.residency import read_shard
from mediagraph.errors import ServiceUnavailable

K = TypeVar("K")
V = TypeVar("V")

CommentRef = tuple[int, int]  # (media id, comment id)


async def load_by_shard(
    context: LoaderContext,
    keys: Sequence[K],
    media_of: Callable[[K], int],
    fetch: Callable[[AsyncSession, list[K]], Awaitable[Sequence[V]]],
) -> list[V | ServiceUnavailable]:
    services = context.services
    router = services.databases.router
    groups: dict[int, list[int]] = defaultdict(list)
    for index, key in enumerate(keys):
        groups[router.physical_shard(media_of(key))].append(index)

    async def run(physical: int, indexes: list[int]) -> Sequence[V]:
        batch = [keys[index] for index in indexes]
        return await read_shard(services, physical, lambda session: fetch(session, batch))

    results = await asyncio.gather(
        *(run(physical, indexes) for physical, indexes in groups.items()), return_exceptions=True
    )
    values: list[V | ServiceUnavailable] = [ServiceUnavailable("")] * len(keys)
    for indexes, result in zip(groups.values(), results, strict=True):
        if isinstance(result, ServiceUnavailable):
            for index in indexes:
                values[index] = ServiceUnavailable(result.message)
        elif isinstance(result, BaseException):
            raise result
        else:
            for index, value in zip(indexes, result, strict=True):
                values[index] = value
    return values


class ThreadWindowByMediaLoader(Loader[WindowKey, ThreadWindow]):
    """A media's comment count with its first comments: `commentCount` asks for zero rows."""

    async def load_batch(self, keys: list[WindowKey]) -> Sequence[ThreadWindow | ServiceUnavailable]:
        return await load_by_shard(self.context, keys, lambda key: key[0], comment_store.thread_windows)


class CommentByIdLoader(Loader[CommentRef, Comment | None]):
    async def load_batch(self, keys: list[CommentRef]) -> Sequence[Comment | ServiceUnavailable | None]:
        return await load_by_shard(self.context, keys, lambda key: key[0], comment_store.comments_by_refs)
