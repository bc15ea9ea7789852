"""Which browser origins may call this API: CORS for HTTP, the `Origin` check for websockets.

One policy serves both: `MEDIAGRAPH_CORS_ORIGINS` (exact origins, or `*`), and without it
the loopback origins on any port in development and none in production. A request with no
`Origin` header is not from a browser page and is never refused for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send
from strawberry.http.websocket_origin import normalize_origin

from mediagraph.settings import Settings

LOOPBACK_ORIGINS = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"
# How long a browser may reuse a preflight's answer (Chromium caps it at two hours).
PREFLIGHT_MAX_AGE_SECONDS = 7200
EXPOSED_HEADERS = ("x-request-id", "retry-after")


@dataclass(frozen=True)
class OriginPolicy:
    origins: frozenset[str]
    any_origin: bool
    pattern: str | None

    @classmethod
    def of(cls, settings: Settings) -> OriginPolicy:
        configured = settings.cors_origins
        if configured is None:
            loopback = settings.environment != "production"
            return cls(frozenset(), any_origin=False, pattern=LOOPBACK_ORIGINS if loopback else None)
        origins = frozenset(origin for item in configured if (origin := normalize_origin(item)) is not None)
        return cls(origins, any_origin="*" in configured, pattern=None)

    def allows(self, origin: str) -> bool:
        if self.any_origin:
            return True
        normalized = normalize_origin(origin)
        if normalized is None:
            return False
        return normalized in self.origins or (
            self.pattern is not None and re.fullmatch(self.pattern, normalized) is not None
        )

    def middleware(self, app: ASGIApp) -> CORSMiddleware:
        return CORSMiddleware(
            app,
            allow_origins=["*"] if self.any_origin else sorted(self.origins),
            allow_origin_regex=self.pattern,
            allow_methods=("GET", "POST"),
            allow_headers=("*",),
            # Cookies and Authorization travel with credentialed requests; the origin is echoed,
            # never `*`, as browsers require for those.
            allow_credentials=True,
            expose_headers=EXPOSED_HEADERS,
            max_age=PREFLIGHT_MAX_AGE_SECONDS,
        )


class BrowserOrigins:
    """CORS for requests that carry an `Origin`; the rest (servers, scripts, same-origin GETs) go straight on."""

    def __init__(self, app: ASGIApp, policy: OriginPolicy) -> None:
        self.app = app
        self.cors = policy.middleware(app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if any(name == b"origin" for name, _ in scope["headers"]):
            await self.cors(scope, receive, send)
        else:
            await self.app(scope, receive, send)
