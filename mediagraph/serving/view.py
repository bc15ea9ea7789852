"""Strawberry's GraphQL view: multipart uploads, GraphiQL, other content types, graphql-transport-ws and the
legacy graphql-ws subprotocol (`serving/graphql_ws.py`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect
from strawberry.asgi import GraphQL
from strawberry.exceptions import ConnectionRejectionError
from strawberry.http.exceptions import WebSocketDisconnected
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL, GRAPHQL_WS_PROTOCOL
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
    Operation,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.types import ErrorMessage, Message, SubscribeMessage

from mediagraph.context import Context
from mediagraph.errors import UserError
from mediagraph.observability import metrics
from mediagraph.serving.cors import OriginPolicy
from mediagraph.serving.graphql_ws import LegacyWSHandler
from mediagraph.serving.schema import MediagraphSchema
from mediagraph.serving.sharing import Ending, SharedStreams, subscription_field
from mediagraph.serving.websocket_limits import (
    TOO_MANY_CONNECTIONS_CLOSE,
    TOO_MANY_CONNECTIONS_REASON,
    OpenSockets,
    client_address,
    subscription_limit_error,
)
from mediagraph.settings import Settings


class TransportWSHandler(BaseGraphQLTransportWSHandler[Context, None]):
    """graphql-transport-ws, with identical state subscriptions sharing one execution."""

    view: GraphQLApp

    async def handle_subscribe(self, message: SubscribeMessage) -> None:
        # Strawberry's own limit answers with an uncoded error: ours is checked first.
        limit = self.view.max_operations_per_socket
        if self.connection_acknowledged and message["id"] not in self.operations and len(self.operations) >= limit:
            errors: Any = [subscription_limit_error(limit)]
            await self.send_message(ErrorMessage(id=message["id"], type="error", payload=errors))
            return
        await super().handle_subscribe(message)

    async def _reject_incremental_delivery(self, operation: Operation[Context, None]) -> None:
        errors: Any = [
            {
                "message": "Incremental delivery is not supported over graphql-transport-ws",
                "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"},
            }
        ]
        await operation.send_operation_message(ErrorMessage(id=operation.id, type="error", payload=errors))

    async def send_message(self, message: Message) -> None:
        if message["type"] == "next":
            metrics.PUSHES_SENT.inc()
        await super().send_message(message)

    async def run_operation(self, operation: Operation[Context, None]) -> None:
        field = subscription_field(self.view.schema, operation.query, operation.operation_name)
        if field is None:
            await self._run_operation(operation)
            return
        active = metrics.SUBSCRIPTIONS.labels(field)
        active.inc()
        try:
            await self._run_operation(operation)
        finally:
            active.dec()

    async def _run_operation(self, operation: Operation[Context, None]) -> None:
        streams = self.view.shared_streams
        key = streams.key_for(self.view.schema, operation.query, operation.operation_name, operation.variables)
        if key is None:
            await super().run_operation(operation)
            return
        websocket: WebSocket = self.websocket.ws  # type: ignore[attr-defined]
        prefix = f'{{"id":{orjson.dumps(operation.id).decode()},"type":"next","payload":'

        async def send_next(payload: str) -> None:
            if operation.completed:
                metrics.PUSHES_DROPPED.inc()
                return
            await websocket.send_text(f"{prefix}{payload}}}")
            metrics.PUSHES_SENT.inc()

        async def send_ending(ending: Ending) -> None:
            if ending.type == "complete":
                await operation.send_operation_message({"id": operation.id, "type": "complete"})
            else:
                errors = orjson.loads(ending.payload or "[]")
                await operation.send_operation_message({"id": operation.id, "type": "error", "payload": errors})

        try:
            await streams.follow(
                key, schema=self.view.schema, context=self.context, send_next=send_next, send_ending=send_ending
            )
        except (WebSocketDisconnect, WebSocketDisconnected, RuntimeError, OSError):
            # The client went away mid-send (Starlette raises RuntimeError once the socket is closed).
            return


class GraphQLApp(GraphQL[Context, None]):
    graphql_transport_ws_handler_class = TransportWSHandler
    graphql_ws_handler_class = LegacyWSHandler
    schema: MediagraphSchema

    def __init__(
        self, schema: MediagraphSchema, settings: Settings, *, ide_page: Callable[[Request], HTMLResponse] | None = None
    ) -> None:
        self.shared_streams = SharedStreams(origin_fixed=bool(settings.public_url))
        self.open_sockets = OpenSockets(settings.max_connections_per_address)
        self.max_operations_per_socket = settings.max_subscriptions_per_connection
        self.origin_policy = OriginPolicy.of(settings)
        self.ide_page = ide_page
        super().__init__(
            schema,
            graphql_ide="graphiql" if settings.graphiql and ide_page is not None else None,
            # graphql-transport-ws first: a client offering both gets it.
            subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL, GRAPHQL_WS_PROTOCOL),
            connection_init_wait_timeout=timedelta(seconds=10),
            multipart_uploads_enabled=True,
            keep_alive=True,
            keep_alive_interval=15,
            # Checked by our handlers, which answer with a coded error.
            max_subscriptions_per_connection=None,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await super().__call__(scope, receive, send)
            return
        address = client_address(scope)
        if not self.open_sockets.admit(address):
            await self._refuse_socket(WebSocket(scope, receive, send))
            return
        # Counted here, with the address's sockets, rather than by each subprotocol's handler.
        metrics.WEBSOCKETS.inc()
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.open_sockets.release(address)
            metrics.WEBSOCKETS.dec()

    def is_websocket_origin_allowed(self, request: Any, origin: str) -> bool:
        # Asked only for a cross-origin handshake (no Origin, or the page's own, is always let in);
        # refused, the handshake is answered 403 before anything runs.
        return self.origin_policy.allows(origin)

    async def _refuse_socket(self, websocket: WebSocket) -> None:
        # Accepted first so the client reads why: a handshake refused outright is only a 403.
        offered = websocket.scope.get("subprotocols") or []
        subprotocol = next((protocol for protocol in offered if protocol in self.protocols), None)
        with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
            await websocket.accept(subprotocol=subprotocol)
            await websocket.close(code=TOO_MANY_CONNECTIONS_CLOSE, reason=TOO_MANY_CONNECTIONS_REASON)

    async def render_graphql_ide(self, request: Request) -> HTMLResponse:
        # Strawberry's page loads GraphiQL from a CDN; ours (routes/pages.py) serves it all itself.
        assert self.ide_page is not None  # graphql_ide is off without it
        return self.ide_page(request)

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
            raise ConnectionRejectionError(
                {"message": error.message, "code": error.code, "extensions": {"code": error.code}}
            ) from None
        return None

    def encode_json(self, data: object) -> str:
        # A str, not bytes: Strawberry sends bytes as binary websocket frames, and
        # graphql-transport-ws clients (browsers among them) expect text frames.
        return orjson.dumps(data).decode()

    def decode_json(self, data: str | bytes) -> Any:
        return orjson.loads(data)
