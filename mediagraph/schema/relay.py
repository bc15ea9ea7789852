"""Relay conventions shared by every domain: the Node interface, edges, page info, page sizes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import strawberry

from mediagraph.errors import BadUserInput

T = TypeVar("T")

DEFAULT_PAGE_SIZE = 20


@strawberry.interface(description="An object with a global id, fetchable with `node(id:)`.")
class Node:
    id: strawberry.ID


@strawberry.type
class PageInfo:
    has_next_page: bool
    end_cursor: str | None
    has_previous_page: bool = False
    start_cursor: str | None = None


@strawberry.type
class Edge(Generic[T]):
    cursor: str
    node: T


def page_size(first: int | None, maximum: int) -> int:
    if first is None:
        return min(DEFAULT_PAGE_SIZE, maximum)
    if first < 1 or first > maximum:
        raise BadUserInput(f"`first` must be between 1 and {maximum}.", argument="first")
    return first


# Node types register how to fetch themselves by raw id(s): `node(id:)` dispatches here.
NodeFetcher = Callable[..., Awaitable[Any]]
NODE_FETCHERS: dict[str, NodeFetcher] = {}
# How many raw ids a type's global id carries (most: one).
NODE_ID_PARTS: dict[str, int] = {}


def register_node(type_name: str, fetch: NodeFetcher, *, id_parts: int = 1) -> None:
    NODE_FETCHERS[type_name] = fetch
    NODE_ID_PARTS[type_name] = id_parts
