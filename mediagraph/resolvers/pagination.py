"""A page of rows with their cursors, as resolvers hand it to the schema's connections, and page sizes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from mediagraph.errors import BadUserInput

R = TypeVar("R")

DEFAULT_PAGE_SIZE = 20


def page_size(first: int | None, maximum: int) -> int:
    if first is None:
        return min(DEFAULT_PAGE_SIZE, maximum)
    if first < 1 or first > maximum:
        raise BadUserInput(f"`first` must be between 1 and {maximum}.", argument="first")
    return first


@dataclass
class Page(Generic[R]):
    items: list[tuple[str, R]]
    has_next_page: bool
    omitted: list[R] = field(default_factory=list)
    # Where to go on from when a page has no items yet paging is not over.
    continuation: str | None = None

    @property
    def end_cursor(self) -> str | None:
        return self.items[-1][0] if self.items else self.continuation
