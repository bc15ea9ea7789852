"""The legacy `graphql-ws` subprotocol (subscriptions-transport-ws), which older Apollo apps speak.

It is served beside graphql-transport-ws with the same rules: the token in `connection_init`
(a bad one gets `connection_error` with its code, then the socket closes), a socket that does
not initialise within the same wait is closed, any operation runs (queries and mutations too),
identical state subscriptions share one execution, and errors carry the same
`extensions.code`. Only the framing differs: `start`/`stop`, `data`, `error`, `complete`, `ka`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import orjson
from graphql import GraphQLError
from starlette.websockets import WebSocket, WebSocketDisconnect
from strawberry.http.exceptions import WebSocketDisconnected
from strawberry.subscriptions.protocols.graphql_ws.handlers import BaseGraphQLWSHandler
from strawberry.subscriptions.protocols.graphql_ws.types import (
    CompleteMessage,
    ConnectionErrorMessage,
    ConnectionInitMessage,
    ErrorMessage,
    StartMessage,
)
from strawberry.types.execution import ExecutionResult, PreExecutionError
from strawberry.utils.aio import aclosing

from mediagraph.context import Context
from mediagraph.observability import metrics
from mediagraph.schema.extensions import coded
from mediagraph.serving.sharing import Ending, StreamKey, subscription_field
from mediagraph.serving.websocket_limits import subscription_limit_error

if TYPE_CHECKING:
    from mediagraph.serving.view import GraphQLApp

INCREMENTAL_DELIVERY = "Incremental delivery is not supported over graphql-ws"
# What graphql-transport-ws closes an uninitialised socket with; this protocol names no code.
INIT_TIMEOUT_CLOSE = 4408
# A send to a socket the client has already closed (Starlette raises RuntimeError then).
GONE = (WebSocketDisconnect, WebSocketDisconnected, RuntimeError, OSError)


class LegacyWSHandler(BaseGraphQLWSHandler[Context, None]):
    view: GraphQLApp

    async def handle(self) -> None:
        watchdog = asyncio.create_task(self._close_unless_initialised())
        try:
            await super().handle()
        finally:
            watchdog.cancel()

    async def _close_unless_initialised(self) -> None:
        await asyncio.sleep(self.view.connection_init_wait_timeout.total_seconds())
        if not self.connection_acknowledged:
            with contextlib.suppress(*GONE):
                await self.websocket.close(code=INIT_TIMEOUT_CLOSE, reason="Connection initialisation timeout")

    async def handle_connection_init(self, message: ConnectionInitMessage) -> None:
        # Strawberry refuses a payload that is not an object with a bare connection_error: ours says why, coded.
        payload = message.get("payload")
        if payload is not None and not isinstance(payload, dict):
            error: Any = {
                "message": "connection_init's payload must be an object.",
                "extensions": {"code": "BAD_USER_INPUT"},
            }
            await self.send_message(ConnectionErrorMessage(type="connection_error", payload=error))
            await self.websocket.close(code=1000, reason="")
            return
        await super().handle_connection_init(message)

    async def handle_start(self, message: StartMessage) -> None:
        # Strawberry's own limit answers with an uncoded error: ours is checked first. A `start`
        # reusing a running operation's id replaces it, so that one does not count.
        limit = self.view.max_operations_per_socket
        running = len(self.tasks) - (message["id"] in self.tasks)
        if self.connection_acknowledged and running >= limit:
            error: Any = subscription_limit_error(limit)
            await self.send_message(ErrorMessage(type="error", id=message["id"], payload=error))
            return
        await super().handle_start(message)

    async def handle_async_results(
        self, operation_id: str, query: str, operation_name: str | None, variables: dict[str, object] | None
    ) -> None:
        field = subscription_field(self.view.schema, query, operation_name)
        active = metrics.SUBSCRIPTIONS.labels(field) if field is not None else None
        if active is not None:
            active.inc()
        try:
            key = self.view.shared_streams.key_for(self.schema, query, operation_name, variables)  # type: ignore[arg-type]
            if key is None:
                await self._run_alone(operation_id, query, operation_name, variables)
            else:
                await self._follow_shared(key, operation_id)
        except asyncio.CancelledError:
            # `stop`: the protocol answers it with `complete`.
            with contextlib.suppress(*GONE):
                await self.send_message(CompleteMessage(type="complete", id=operation_id))
        except GONE:
            return
        finally:
            if active is not None:
                active.dec()
            self.tasks.pop(operation_id, None)

    async def _run_alone(
        self, operation_id: str, query: str, operation_name: str | None, variables: dict[str, object] | None
    ) -> None:
        source = await self.schema.stream(
            query,
            variable_values=variables,
            context_value=self.context,
            root_value=self.root_value,
            operation_name=operation_name,
        )
        first = True
        async with aclosing(source):
            async for result in source:
                if first and isinstance(result, PreExecutionError):
                    await self._send_error(operation_id, result.errors or [])
                    return
                if not isinstance(result, ExecutionResult):
                    await self._send_error(operation_id, [GraphQLError(INCREMENTAL_DELIVERY)])
                    return
                first = False
                await self.send_data_message(result, operation_id)
                metrics.PUSHES_SENT.inc()
        await self.send_message(CompleteMessage(type="complete", id=operation_id))

    async def _follow_shared(self, key: StreamKey, operation_id: str) -> None:
        websocket: WebSocket = self.websocket.ws  # type: ignore[attr-defined]
        prefix = f'{{"type":"data","id":{orjson.dumps(operation_id).decode()},"payload":'

        async def send_next(payload: str) -> None:
            await websocket.send_text(f"{prefix}{payload}}}")
            metrics.PUSHES_SENT.inc()

        async def send_ending(ending: Ending) -> None:
            if ending.type == "complete":
                await self.send_message(CompleteMessage(type="complete", id=operation_id))
                return
            errors = orjson.loads(ending.payload or "[]")
            await self.send_message(ErrorMessage(type="error", id=operation_id, payload=errors[0]))

        await self.view.shared_streams.follow(
            key, schema=self.view.schema, context=self.context, send_next=send_next, send_ending=send_ending
        )

    async def _send_error(self, operation_id: str, errors: list[GraphQLError]) -> None:
        # The protocol's `error` carries one error: the first, as graphql-transport-ws sends it first.
        first = errors[0] if errors else GraphQLError("The operation failed.")
        payload: Any = coded(first).formatted
        await self.send_message(ErrorMessage(type="error", id=operation_id, payload=payload))
