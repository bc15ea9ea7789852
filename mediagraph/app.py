"""The Starlette application: GraphQL, health checks, media download, and the lifespan."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mediagraph.db.provision import provision
from mediagraph.embedded import resolve_endpoints
from mediagraph.graphql_app import GraphQLApp
from mediagraph.routes.content import media_content
from mediagraph.routes.health import healthz, readyz
from mediagraph.schema import build_schema
from mediagraph.services import Services
from mediagraph.settings import Settings, get_settings
from mediagraph.workers import run_workers

log = logging.getLogger(__name__)

# Room for the multipart envelope and the operations/map fields around the file.
MULTIPART_OVERHEAD_BYTES = 1024 * 1024
JSON_BODY_LIMIT_BYTES = 1024 * 1024


class BodySizeLimit:
    """Refuses request bodies over the limit before anything buffers or parses them."""

    def __init__(self, app: ASGIApp, *, settings: Settings) -> None:
        self.app = app
        self.multipart_limit = settings.max_upload_bytes + MULTIPART_OVERHEAD_BYTES

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        content_type = headers.get(b"content-type", b"").decode("latin-1")
        limit = self.multipart_limit if content_type.startswith("multipart/") else JSON_BODY_LIMIT_BYTES
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _too_large(send, limit)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        try:
            await self.app(scope, limited_receive, send)
        except BodyTooLarge:
            await _too_large(send, limit)


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        self.limit = limit


async def _too_large(send: Send, limit: int) -> None:
    body = (
        b'{"errors":[{"message":"The request body is larger than '
        + str(limit).encode()
        + b' bytes.","extensions":{"code":"PAYLOAD_TOO_LARGE"}}]}'
    )
    await send({"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def create_app(settings: Settings | None = None) -> Starlette:
    settings = settings or get_settings()
    schema = build_schema(settings)
    graphql = GraphQLApp(schema, settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        endpoints, embedded = resolve_endpoints(settings)
        try:
            if embedded is not None:
                await provision(endpoints, logical_shards=settings.logical_shards)
            services = await Services.open(settings, endpoints)
            app.state.services = services
            async with run_workers(services, enabled=settings.run_workers):
                yield
            await services.close()
        finally:
            if embedded is not None:
                embedded.stop()

    return Starlette(
        routes=[
            Route("/graphql", graphql, methods=["GET", "POST"]),
            WebSocketRoute("/graphql", graphql),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/media/{media_id}/content", media_content, methods=["GET", "HEAD"]),
        ],
        middleware=[Middleware(BodySizeLimit, settings=settings)],
        lifespan=lifespan,
    )
