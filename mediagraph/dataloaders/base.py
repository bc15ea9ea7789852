"""The shared loader base: built per request by `Context.loader`, batching by key."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Hashable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from strawberry.dataloader import DataLoader

from mediagraph.db.operation import OperationSession
from mediagraph.db.rows import ModelT, RowBuilder
from mediagraph.services import Services

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LoaderContext(Protocol):
    """What a loader needs of the request it serves (the request's `Context` provides it)."""

    @property
    def services(self) -> Services: ...

    @property
    def db(self) -> OperationSession: ...

    @property
    def viewer_id(self) -> int | None: ...


class Loader(DataLoader[K, V], Generic[K, V]):
    def __init__(self, context: LoaderContext) -> None:
        super().__init__(load_fn=self.load_batch)
        # A bound method kept on the instance would be a reference cycle, leaving each
        # loader, and the whole request it reaches, to the cyclic garbage collector.
        # The class-level `load_fn` binds on each use instead.
        del self.load_fn
        self.context = context

    def load_fn(self, keys: list[K]) -> Awaitable[Sequence[V | BaseException]]:
        return self.load_batch(keys)

    def load(self, key: K) -> Awaitable[V]:
        if self.cache and self.cache_map.get(key) is None:
            known = self.known(key)
            if known is not None:
                # Settled before the caller awaits it: a resolver that finds all it needs
                # here completes without waiting for a batch.
                self.prime(key, known)
        future = super().load(key)
        if not isinstance(future, asyncio.Future) or future.done():
            return future
        # One future answers every field of the operation that asks for this key. graphql-core
        # cancels the fields still running beside a failed non-null one; cancelling the shared
        # future would fail the other fields waiting on it with CancelledError, and with them
        # the whole request. Each caller waits behind a shield of its own instead.
        return asyncio.shield(future)

    def known(self, key: K) -> V | None:
        """A value available without reading (a hot row); None to load it in the batch."""
        return None

    async def load_batch(self, keys: list[K]) -> Sequence[V | BaseException]:
        """Values in key order; an exception in place of a value fails only that key's load."""
        raise NotImplementedError


class HotRowsByIdLoader(Loader[int, "ModelT | None"], Generic[ModelT]):
    """Rows by id that may come from the process's hot rows (`db/hot.py`): staleness is bounded.

    For what requests display; checks that must see the latest row (authentication)
    use a loader that always reads.
    """

    table: str
    statement: str
    rows: RowBuilder[ModelT]

    def known(self, key: int) -> ModelT | None:
        row = self.context.services.databases.main_reads.hot.get(self.table, key)
        return self.rows(row) if row is not None else None

    def clear(self, key: int) -> None:
        # Whoever clears a loader after writing the row must not be served the old one after.
        self.context.services.databases.main_reads.hot.forget(self.table, key)
        if self.cache_map.get(key) is not None:  # Strawberry's clear fails on a key never loaded
            super().clear(key)

    async def records(self, keys: Sequence[int]) -> dict[int, Mapping[str, Any]]:
        """The plain rows of these keys, by key (a missing one is left out): from the hot rows,
        the rest in one read, and no model instance built; for a page that builds its own objects."""
        reads = self.context.services.databases.main_reads
        found: dict[int, Mapping[str, Any]] = {}
        missing = []
        for key in keys:
            row = reads.hot.get(self.table, key)
            if row is None:
                missing.append(key)
            else:
                found[key] = row
        if missing:
            fetched = await reads.fetch_keyed(self.statement, "id", missing)
            reads.hot.put_all(self.table, fetched)
            found.update(fetched)
        return found

    async def load_batch(self, keys: list[int]) -> Sequence[ModelT | None]:
        reads = self.context.services.databases.main_reads
        found = await reads.fetch_keyed(self.statement, "id", keys)
        reads.hot.put_all(self.table, found)
        return [self.rows(found[key]) if key in found else None for key in keys]
