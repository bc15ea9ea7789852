"""The Starlette application: GraphQL, health checks, media download, and the lifespan."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.types import Receive, Scope, Send

from mediagraph.db.provision import provision
from mediagraph.embedded import resolve_endpoints
from mediagraph.observability import request_ids
from mediagraph.observability.exposition import Exposure, MetricsAccess
from mediagraph.observability.tracing import configure_tracing
from mediagraph.redis_pool import durability_warnings
from mediagraph.routes.assets import ASSETS_PATH, dashboard_page, graphiql_page, vendored_assets
from mediagraph.routes.content import media_content
from mediagraph.routes.health import healthz, readyz
from mediagraph.routes.metrics import metrics_endpoint, sampling
from mediagraph.services import Services
from mediagraph.serving.bodies import BodySizeLimit
from mediagraph.serving.cors import BrowserOrigins
from mediagraph.serving.endpoint import GraphQLEndpoint
from mediagraph.serving.memory import tune_for_serving
from mediagraph.serving.schema import build_schema
from mediagraph.serving.sharing import SharedStreams
from mediagraph.serving.view import GraphQLApp
from mediagraph.settings import Settings, get_settings
from mediagraph.workers import run_workers

log = logging.getLogger(__name__)

GRAPHQL_PATH = "/graphql"
METRICS_PATH = "/metrics"


class MediagraphApp(Starlette):
    """Starlette, with GraphQL's JSON and GET requests answered before routing and middleware.

    That path checks the body limit and answers failures itself; uploads, GraphiQL,
    websockets and every other route take the usual way through the middleware. Every
    request first gets its request id (observability/request_ids.py), returned in the
    `x-request-id` header; on the metrics port only /metrics answers.
    """

    graphql: GraphQLEndpoint
    # The websocket view's shared subscription streams, for tests and diagnostics.
    shared_streams: SharedStreams
    metrics_access: MetricsAccess
    # CORS around every HTTP route, the fast path included (serving/cors.py).
    browser_origins: BrowserOrigins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await super().__call__(scope, receive, send)
            return
        request_id = request_ids.from_headers(scope["headers"])
        token = request_ids.CURRENT.set(request_id)
        try:
            if scope["type"] == "http":
                send = request_ids.sending_request_id(send, request_id)
                if self.metrics_port is not None and self._on_metrics_port(scope):
                    await self._serve_metrics_port(scope, receive, send)
                    return
                await self.browser_origins(scope, receive, send)
                return
            await super().__call__(scope, receive, send)
        finally:
            request_ids.CURRENT.reset(token)

    async def _serve_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == GRAPHQL_PATH:
            scope["app"] = self
            if await self.graphql.serve(scope, receive, send):
                return
        await super().__call__(scope, receive, send)

    @property
    def metrics_port(self) -> int | None:
        return self.metrics_access.port

    def _on_metrics_port(self, scope: Scope) -> bool:
        server = scope.get("server")
        return server is not None and server[1] == self.metrics_port

    async def _serve_metrics_port(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == METRICS_PATH:
            await super().__call__(scope, receive, send)
            return
        await PlainTextResponse("Not Found: this port serves /metrics only", status_code=404)(scope, receive, send)


def create_app(settings: Settings | None = None) -> MediagraphApp:
    settings = settings or get_settings()
    access = MetricsAccess.of(settings)
    configure_tracing()
    schema = build_schema(settings)
    view = GraphQLApp(schema, settings, ide_page=graphiql_page)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        endpoints, embedded = resolve_endpoints(settings)
        try:
            if embedded is not None:
                await provision(endpoints, logical_shards=settings.logical_shards)
            services = await Services.open(settings, endpoints)
            app.state.services = services
            for warning in await durability_warnings(services.redis):
                log.warning(warning)
            tune_for_serving()
            log.log(logging.WARNING if access.exposure is Exposure.OFF else logging.INFO, access.describe())
            async with (
                sampling(services, interval=settings.metrics_sample_seconds, enabled=access.enabled),
                run_workers(services, enabled=settings.run_workers),
            ):
                yield
            await services.close()
        finally:
            if embedded is not None:
                embedded.stop()

    routes: list[BaseRoute] = [
        Route(GRAPHQL_PATH, view, methods=["GET", "POST"]),
        WebSocketRoute(GRAPHQL_PATH, view),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route(METRICS_PATH, metrics_endpoint),
        Route("/media/{media_id}/content", media_content, methods=["GET", "HEAD"]),
    ]
    if settings.serves_dashboard:
        routes.append(Route("/dashboard", dashboard_page))
    if settings.graphiql or settings.serves_dashboard:
        routes.append(Mount(ASSETS_PATH, app=vendored_assets(), name="assets"))
    app = MediagraphApp(
        routes=routes,
        middleware=[Middleware(BodySizeLimit, settings=settings)],
        lifespan=lifespan,
    )
    app.graphql = GraphQLEndpoint(schema, settings)
    app.shared_streams = view.shared_streams
    app.metrics_access = access
    app.browser_origins = BrowserOrigins(app._serve_http, view.origin_policy)
    return app
