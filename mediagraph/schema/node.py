from __future__ import annotations

import strawberry
from strawberry.types import Info

from mediagraph.context import Context
from mediagraph.errors import BadUserInput
from mediagraph.ids import parse_global_id
from mediagraph.schema.relay import NODE_FETCHERS, NODE_ID_PARTS, Node


@strawberry.type
class NodeQueries:
    @strawberry.field(description="Fetch any object by its global id.")
    async def node(self, info: Info[Context, None], id: strawberry.ID) -> Node | None:
        type_name, raw_ids = parse_global_id(id)
        fetch = NODE_FETCHERS.get(type_name)
        if fetch is None:
            return None
        if len(raw_ids) != NODE_ID_PARTS[type_name]:
            raise BadUserInput(f"Malformed id {id[:40]!r}.")
        return await fetch(info.context, *raw_ids)  # type: ignore[no-any-return]

    @strawberry.field(description="Fetch many objects by global id, in order; null where missing.")
    async def nodes(self, info: Info[Context, None], ids: list[strawberry.ID]) -> list[Node | None]:
        if len(ids) > info.context.settings.max_page_size:
            raise BadUserInput(f"At most {info.context.settings.max_page_size} ids at once.", argument="ids")
        return [await self.node(info, node_id) for node_id in ids]
