"""The shared loader base: built per request by `Context.loader`, batching by key."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

from strawberry.dataloader import DataLoader

if TYPE_CHECKING:
    from mediagraph.context import Context

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Loader(DataLoader[K, V], Generic[K, V]):
    def __init__(self, context: Context) -> None:
        super().__init__(load_fn=self._load)
        self.context = context

    async def _load(self, keys: list[K]) -> Sequence[V | BaseException]:
        return await self.load_batch(keys)

    async def load_batch(self, keys: list[K]) -> Sequence[V | BaseException]:
        """Values in key order; an exception in place of a value fails only that key's load."""
        raise NotImplementedError
