"""Pages as resolvers hand them to the schema's connections: the Relay arguments read once, the rows with
their cursors, and which way more rows lie."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from mediagraph.db.media import MediaCounts
from mediagraph.errors import BadUserInput

R = TypeVar("R")
S = TypeVar("S")

DEFAULT_PAGE_SIZE = 20


def page_size(first: int | None, maximum: int, *, argument: str = "first") -> int:
    if first is None:
        return min(DEFAULT_PAGE_SIZE, maximum)
    if first < 1 or first > maximum:
        raise BadUserInput(f"`{argument}` must be between 1 and {maximum}.", argument=argument)
    return first


@dataclass(frozen=True)
class PageRequest:
    """What a connection's arguments ask for: `size` rows after `cursor` (`first`/`after`), or the
    `size` rows just before it (`last`/`before`) when `backward`."""

    size: int
    cursor: str | None
    backward: bool = False


def page_request(
    *,
    first: int | None,
    after: str | None,
    last: int | None = None,
    before: str | None = None,
    maximum: int,
    default: int = DEFAULT_PAGE_SIZE,
    forward_only: str | None = None,
) -> PageRequest:
    """Relay's arguments, one direction at a time; `forward_only` says why a connection cannot go back."""
    if last is None and before is None:
        return PageRequest(page_size(default if first is None else first, maximum), after)
    if forward_only is not None:
        raise BadUserInput(forward_only, argument="last" if last is not None else "before")
    if first is not None or after is not None:
        raise BadUserInput(
            "Page forward with `first` and `after`, or backward with `last` and `before`, not both at once.",
            argument="last" if last is not None else "before",
        )
    return PageRequest(page_size(default if last is None else last, maximum, argument="last"), before, backward=True)


@dataclass
class Page(Generic[R]):
    items: list[tuple[str, R]]
    has_next_page: bool
    omitted: list[R] = field(default_factory=list)
    # Where to go on from when a page has no items yet paging is not over.
    continuation: str | None = None
    has_previous_page: bool = False
    # Pages of media: counts read with the rows, by media id.
    counts: dict[int, MediaCounts] = field(default_factory=dict)

    @property
    def end_cursor(self) -> str | None:
        return self.items[-1][0] if self.items else self.continuation

    @property
    def start_cursor(self) -> str | None:
        return self.items[0][0] if self.items else None

    def map(self, convert: Callable[[R], S]) -> Page[S]:
        return Page(
            items=[(cursor, convert(item)) for cursor, item in self.items],
            has_next_page=self.has_next_page,
            omitted=[convert(item) for item in self.omitted],
            continuation=self.continuation,
            has_previous_page=self.has_previous_page,
            counts=self.counts,
        )


def keyset_page(request: PageRequest, rows: Sequence[R], cursor_of: Callable[[R], str]) -> Page[R]:
    """A page from up to `size + 1` rows read away from the cursor (backward: nearest the cursor first).

    The extra row says whether more lie that way. The other way, rows lie at least as far as the
    cursor itself (a row once seen there), so a page from a cursor says so."""
    more = len(rows) > request.size
    kept = list(rows[: request.size])
    if request.backward:
        kept.reverse()
    items = [(cursor_of(row), row) for row in kept]
    beyond_cursor = request.cursor is not None
    if request.backward:
        return Page(items=items, has_next_page=beyond_cursor, has_previous_page=more)
    return Page(items=items, has_next_page=more, has_previous_page=beyond_cursor)
