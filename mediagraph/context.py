"""The typed per-operation context: who is asking, one database session, the loaders."""

from __future__ import annotations

from functools import cached_property
from typing import Any, TypeVar

from starlette.requests import HTTPConnection
from starlette.websockets import WebSocket

from mediagraph.dataloaders.base import Loader
from mediagraph.dataloaders.users import FreshUserByIdLoader
from mediagraph.db.operation import OperationSession
from mediagraph.db.users import User
from mediagraph.errors import Forbidden, Unauthenticated
from mediagraph.security import SERVICE_ROLE, TokenClaims, bearer_token, read_token
from mediagraph.services import Services

LoaderT = TypeVar("LoaderT", bound=Loader[Any, Any])


class Context:
    def __init__(self, services: Services, connection: HTTPConnection | None) -> None:
        self.services = services
        self.settings = services.settings
        self.request = connection
        # Filled by Strawberry from the websocket `connection_init` payload.
        self.connection_params: dict[str, Any] | None = None
        self.response: Any = None
        self.db = OperationSession(services.databases.main_sessions, per_use=isinstance(connection, WebSocket))
        self._loaders: dict[type[Loader[Any, Any]], Loader[Any, Any]] = {}

    def loader(self, loader_class: type[LoaderT]) -> LoaderT:
        loader = self._loaders.get(loader_class)
        if loader is None:
            loader = self._loaders[loader_class] = loader_class(self)
        return loader  # type: ignore[return-value]

    def loaded(self, loader_class: type[LoaderT]) -> LoaderT | None:
        """The operation's loader of that class if a field has used it, without making one."""
        return self._loaders.get(loader_class)  # type: ignore[return-value]

    async def close(self) -> None:
        await self.db.close()
        # Loaders cache per operation (a websocket's context outlives many); dropping them
        # also breaks the loader -> context cycle, so a request's objects are freed at once.
        self.forget_loaded()

    def forget_loaded(self) -> None:
        """Drop what the loaders hold, so the next read sees the current values."""
        self._loaders.clear()

    @property
    def raw_token(self) -> str | None:
        if self.connection_params is not None:
            value = self.connection_params.get("authorization") or self.connection_params.get("Authorization")
            if isinstance(value, str):
                return bearer_token(value) if " " in value else value
            token = self.connection_params.get("token")
            return token if isinstance(token, str) else None
        if self.request is None:
            return None
        # Read off the raw headers: a Headers object per request costs more than finding one.
        for name, value in self.request.scope["headers"]:
            if name == b"authorization":
                return bearer_token(value.decode("latin-1"))
        return None

    @cached_property
    def claims(self) -> TokenClaims | None:
        token = self.raw_token
        return read_token(self.settings, token) if token else None

    @property
    def viewer_id(self) -> int | None:
        claims = self.claims
        return claims.user_id if claims is not None and claims.role != SERVICE_ROLE else None

    def require_viewer_id(self) -> int:
        viewer_id = self.viewer_id
        if viewer_id is None:
            raise Unauthenticated("Log in to do this.")
        return viewer_id

    async def require_viewer(self) -> User:
        """The logged-in user, checked against revocation (token version) and deletion."""
        viewer_id = self.require_viewer_id()
        user = await self.loader(FreshUserByIdLoader).load(viewer_id)
        claims = self.claims
        if user is None or claims is None or user.token_version != claims.token_version:
            raise Unauthenticated("The access token is no longer valid.")
        return user

    def require_service(self) -> None:
        claims = self.claims
        if claims is None:
            raise Unauthenticated("A service token is required.")
        if claims.role != SERVICE_ROLE:
            raise Forbidden("Only trusted services may do this.")

    @property
    def public_origin(self) -> str:
        """What absolute URLs of this API start with: `public_url`, else this request's own origin
        (scheme and host as uvicorn sets them, from the trusted proxies' headers)."""
        if self.settings.public_url or self.request is None:
            return self.settings.public_url
        url = self.request.url
        # A websocket's own origin serves plain HTTP on the same host: ws -> http, wss -> https.
        scheme = {"ws": "http", "wss": "https"}.get(url.scheme, url.scheme)
        return f"{scheme}://{url.netloc}"

    @property
    def client_address(self) -> str:
        if self.request is None or self.request.client is None:
            return "unknown"
        return self.request.client.host
