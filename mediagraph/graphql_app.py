"""The GraphQL endpoint: HTTP (POST, GET for queries, multipart uploads) and graphql-transport-ws."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL

from mediagraph.context import Context
from mediagraph.errors import UserError
from mediagraph.schema import MediagraphSchema
from mediagraph.settings import Settings


class GraphQLApp(GraphQL[Context, None]):
    def __init__(self, schema: MediagraphSchema, settings: Settings) -> None:
        super().__init__(
            schema,
            graphql_ide="graphiql" if settings.graphiql else None,
            subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
            connection_init_wait_timeout=timedelta(seconds=10),
            multipart_uploads_enabled=True,
            keep_alive=True,
            keep_alive_interval=15,
        )

    async def get_context(self, request: Request | WebSocket, response: Response | WebSocket) -> Context:
        context = Context(request.app.state.services, request)
        context.response = response
        return context

    async def on_ws_connect(self, context: Context) -> dict[str, object] | None:
        # Read the token once at connection_init so a bad one is refused up front
        # rather than failing every operation on the socket.
        try:
            _ = context.claims
        except UserError as error:
            raise ConnectionRejectionError({"message": error.message, "code": error.code}) from None
        return None

    def encode_json(self, data: object) -> bytes:
        return orjson.dumps(data)

    def decode_json(self, data: str | bytes) -> Any:
        return orjson.loads(data)
