"""Relay conventions shared by every domain: the Node interface, edges, page info, page sizes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import strawberry

# Defined beside `Page` so resolvers need not import the schema package (which imports them).
from mediagraph.resolvers.pagination import DEFAULT_PAGE_SIZE, page_size

__all__ = ["DEFAULT_PAGE_SIZE", "NODE_FETCHERS", "Edge", "Node", "PageInfo", "page_size", "register_node"]

T = TypeVar("T")


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


# Node types register how to fetch themselves by raw id(s): `node(id:)` dispatches here.
NodeFetcher = Callable[..., Awaitable[Any]]
NODE_FETCHERS: dict[str, NodeFetcher] = {}
# How many raw ids a type's global id carries (most: one).
NODE_ID_PARTS: dict[str, int] = {}


def register_node(type_name: str, fetch: NodeFetcher, *, id_parts: int = 1) -> None:
    NODE_FETCHERS[type_name] = fetch
    NODE_ID_PARTS[type_name] = id_parts
