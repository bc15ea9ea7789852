"""`/graphql` JSON POST and GET queries, answered before Starlette's routing and middleware.

`serve` takes what nearly all traffic is (a JSON body, or a GET with `query` or a
persisted-query hash) and returns False for the rest, which Strawberry's view
handles: multipart uploads, GraphiQL, websockets, other content types.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mediagraph.observability import request_ids
from mediagraph.services import Services
from mediagraph.serving.bodies import JSON_BODY_LIMIT_BYTES, BodyTooLarge, header, read_json_body, too_large
from mediagraph.serving.execution import OperationRunner
from mediagraph.serving.media_types import GRAPHQL_RESPONSE, is_request_error, response_media_type
from mediagraph.serving.persisted import PersistedQueries
from mediagraph.serving.requests import (
    GraphQLRequest,
    RequestRefused,
    from_json_body,
    from_query_parameters,
    query_parameters,
)
from mediagraph.serving.schema import MediagraphSchema
from mediagraph.settings import Settings

log = logging.getLogger(__name__)

TEXT_HEADERS = [(b"content-type", b"text/plain; charset=utf-8")]


def _sub_response() -> Response:
    # What resolvers may adjust through `context.response`, as with Strawberry's view.
    response = Response()
    response.status_code = None  # type: ignore[assignment]
    del response.headers["content-length"]
    return response


class GraphQLEndpoint:
    def __init__(self, schema: MediagraphSchema, settings: Settings) -> None:
        self.runner = OperationRunner(
            schema,
            PersistedQueries(local_size=settings.document_cache_size, max_stored=settings.persisted_queries_max),
            plans=settings.execution_plans,
        )

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """Answer the request if it is one for the fast path; False leaves it untouched for the view."""
        method = scope["method"]
        if method == "POST":
            if b"application/json" not in (header(scope, b"content-type") or b"").lower():
                return False
            try:
                body = await read_json_body(scope, receive)
            except BodyTooLarge:
                await too_large(send, JSON_BODY_LIMIT_BYTES)
                return True
            await self._answer(scope, send, lambda: from_json_body(body))
            return True
        if method == "GET":
            parameters = query_parameters(scope["query_string"])
            # Without a query or a persisted-query hash, GET is GraphiQL (or its refusal).
            if "query" in parameters or "extensions" in parameters:
                await self._answer(scope, send, lambda: from_query_parameters(parameters))
                return True
        return False

    async def _answer(self, scope: Scope, send: Send, read: Callable[[], GraphQLRequest]) -> None:
        sub_response = _sub_response()
        services: Services = scope["app"].state.services
        try:
            result = await self.runner.run(
                read(), method=scope["method"], http=Request(scope), services=services, sub_response=sub_response
            )
        except RequestRefused as refused:
            await _send(send, refused.status, TEXT_HEADERS, refused.reason.encode())
            return
        except Exception:
            # What Starlette's error middleware would do, had the request gone through it.
            log.exception("GraphQL request failed")
            await _send(send, 500, TEXT_HEADERS, b"Internal Server Error")
            return
        errors = result.get("errors")
        status = sub_response.status_code or 200
        media_type = response_media_type(header(scope, b"accept"))
        if errors:
            request_ids.tag_errors(errors)
            if media_type is GRAPHQL_RESPONSE and is_request_error(result):
                del result["data"]
                status = 400
        headers = [(b"content-type", media_type), *sub_response.headers.raw]
        await _send(send, status, headers, orjson.dumps(result))


async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
