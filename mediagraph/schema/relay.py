"""Relay conventions shared by every domain: the Node interface, edges, page info."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar, cast

import strawberry
from graphql import FieldNode, FragmentDefinitionNode, FragmentSpreadNode, InlineFragmentNode, SelectionNode
from strawberry.types import Info

from mediagraph.resolvers.pagination import DEFAULT_PAGE_SIZE, Page, PageRequest, page_request
from mediagraph.settings import Settings

T = TypeVar("T")


@strawberry.interface(description="An object with a global id, fetchable with `node(id:)`.")
class Node:
    id: strawberry.ID


@strawberry.type(description="Where a page lies in its connection (Relay cursor connections).")
class PageInfo:
    has_next_page: bool = strawberry.field(
        description="Whether rows follow the page. Paging backward (`last`/`before`): true when `before` was given."
    )
    end_cursor: str | None = strawberry.field(description="The last edge's cursor, to pass as `after` for the next page; null when the page is empty.")
    has_previous_page: bool = strawberry.field(
        default=False,
        description="Whether rows precede the page. Paging forward (`first`/`after`): true when `after` was given.",
    )
    start_cursor: str | None = strawberry.field(
        default=None,
        description="The first edge's cursor, to pass as `before` for the previous page; null when the page is empty.",
    )

    @classmethod
    def of(cls, page: Page[Any]) -> PageInfo:
        return cls(
            has_next_page=page.has_next_page,
            end_cursor=page.end_cursor,
            has_previous_page=page.has_previous_page,
            start_cursor=page.start_cursor,
        )


def requested(
    settings: Settings,
    *,
    first: int | None,
    after: str | None,
    last: int | None = None,
    before: str | None = None,
    default: int = DEFAULT_PAGE_SIZE,
    forward_only: str | None = None,
) -> PageRequest:
    """A connection field's Relay arguments, capped at `max_page_size`."""
    return page_request(
        first=first,
        after=after,
        last=last,
        before=before,
        maximum=settings.max_page_size,
        default=default,
        forward_only=forward_only,
    )


@strawberry.type
class Edge(Generic[T]):
    cursor: str
    node: T


# Node types register how to fetch themselves by raw id(s): `node(id:)` dispatches here.
NodeFetcher = Callable[..., Awaitable[Any]]
NODE_FETCHERS: dict[str, NodeFetcher] = {}
# The kind of each raw id a type's global id carries (most: one integer).
IdShape = tuple[type[int] | type[uuid.UUID], ...]
NODE_ID_SHAPES: dict[str, IdShape] = {}


def register_node(type_name: str, fetch: NodeFetcher, *, id_parts: int = 1, id_shape: IdShape | None = None) -> None:
    """`id_parts` integers make the type's global id, or the parts `id_shape` names (a uuid among them)."""
    NODE_FETCHERS[type_name] = fetch
    NODE_ID_SHAPES[type_name] = id_shape if id_shape is not None else (int,) * id_parts


# Object types refer to each other both ways (a user's media, a media's uploader). Their
# annotations do so lazily (`strawberry.lazy`, imports under TYPE_CHECKING). At run time
# imports between domain modules go one way (users <- media <- the rest): where a lower
# module must build a higher module's object, it asks for it by type name here, and the
# higher module registers how to build it when it loads.
ObjectBuilder = Callable[[Any], Any]
OBJECT_BUILDERS: dict[str, ObjectBuilder] = {}


# The builder of a MediaConnection from plain rows (the lists), beside "MediaConnection" from model instances.
MEDIA_RECORDS_CONNECTION = "MediaConnection.records"


def register_builder(type_name: str, build: ObjectBuilder) -> None:
    OBJECT_BUILDERS[type_name] = build


def selects(info: Info[Any, Any], *path: str) -> bool:
    """Whether the field's selection reaches `path` (field names, through fragments).

    Directives are not evaluated: a field under `@skip`/`@include` counts as selected,
    so a resolver that prepares for it at worst prepares in vain."""
    raw = info._raw_info
    return _reaches(raw.field_nodes, raw.fragments, path)


def _reaches(nodes: Sequence[FieldNode], fragments: dict[str, FragmentDefinitionNode], path: Sequence[str]) -> bool:
    if not path:
        return True
    return any(
        node.selection_set is not None and _among(node.selection_set.selections, fragments, path)
        for node in nodes
    )


def _among(
    selections: Sequence[SelectionNode], fragments: dict[str, FragmentDefinitionNode], path: Sequence[str]
) -> bool:
    for selection in selections:
        if isinstance(selection, FieldNode):
            if selection.name.value == path[0] and _reaches([selection], fragments, path[1:]):
                return True
        elif isinstance(selection, InlineFragmentNode):
            if _among(selection.selection_set.selections, fragments, path):
                return True
        elif isinstance(selection, FragmentSpreadNode):
            fragment = fragments.get(selection.name.value)
            if fragment is not None and _among(fragment.selection_set.selections, fragments, path):
                return True
    return False


class BuiltByName(Generic[T]):
    """Builds `type_name`'s object from a source (a page, a resolver's result) with its module's builder."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __call__(self, source: Any) -> T:
        return cast(T, OBJECT_BUILDERS[self.type_name](source))
