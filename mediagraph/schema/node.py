from __future__ import annotations

import asyncio
from typing import cast

import strawberry
from strawberry.types import Info

from mediagraph.context import Context
from mediagraph.errors import BadUserInput
from mediagraph.ids import parse_global_id
from mediagraph.schema.relay import NODE_FETCHERS, NODE_ID_SHAPES, Node


async def fetch_node(context: Context, global_id: str) -> Node | None:
    """The object a global id names, or None when no such object (or type) exists."""
    type_name, raw_ids = parse_global_id(global_id)
    fetch = NODE_FETCHERS.get(type_name)
    if fetch is None:
        return None
    shape = NODE_ID_SHAPES[type_name]
    if len(raw_ids) != len(shape) or not all(isinstance(part, kind) for part, kind in zip(raw_ids, shape, strict=True)):
        raise BadUserInput(f"Malformed id {global_id[:40]!r}.")
    return await fetch(context, *raw_ids)  # type: ignore[no-any-return]


@strawberry.type
class NodeQueries:
    # Root fields get no `self` (the root value is None): they call module functions.
    @strawberry.field(description="Fetch any object by its global id; null when it names nothing (any more).")
    async def node(self, info: Info[Context, None], id: strawberry.ID) -> Node | None:
        return await fetch_node(info.context, id)

    @strawberry.field(
        description="Fetch many objects by global id, in the order given; null for ids that name nothing. "
        "At most `first`'s cap (100) ids at once."
    )
    async def nodes(self, info: Info[Context, None], ids: list[strawberry.ID]) -> list[Node | None]:
        limit = info.context.settings.max_page_size
        if len(ids) > limit:
            raise BadUserInput(f"At most {limit} ids at once.", argument="ids", limit=limit)
        # Fetched together, so each type's loader reads all its ids in one batch.
        fetched = await asyncio.gather(*(fetch_node(info.context, node_id) for node_id in ids), return_exceptions=True)
        for outcome in fetched:
            if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
                raise outcome  # cancelled: not one id's failure
        # An id that fails (malformed, FORBIDDEN) nulls its own place, its error at that index
        # (graphql-core raises an exception it finds in a list where the item would be), not the list.
        return cast(list[Node | None], fetched)
