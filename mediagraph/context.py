"""The typed per-operation context: who is asking, one database session, the loaders."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from starlette.requests import HTTPConnection
from starlette.websockets import WebSocket

from mediagraph.errors import Forbidden, Unauthenticated
from mediagraph.security import SERVICE_ROLE, TokenClaims, bearer_token, read_token
from mediagraph.services import Services

if TYPE_CHECKING:
    from mediagraph.dataloaders.base import Loader
    from mediagraph.db.users import User

LoaderT = TypeVar("LoaderT", bound="Loader[Any, Any]")

log = logging.getLogger(__name__)


class OperationSession:
    """One main-database session per operation, opened on first use.

    Sibling fields resolve concurrently but an AsyncSession allows one statement
    at a time, so every use takes the lock. A websocket's context lives as long as
    the socket, so there each use gets a session of its own (`per_use`).
    """

    def __init__(self, factory: async_sessionmaker[AsyncSession], *, per_use: bool = False) -> None:
        self._factory = factory
        self._per_use = per_use
        self._session: AsyncSession | None = None
        self._lock = asyncio.Lock()

    @asynccontextmanager
    async def use(self) -> AsyncIterator[AsyncSession]:
        async with self._lock:
            if self._session is None:
                self._session = self._factory()
            try:
                yield self._session
            except BaseException:
                await self._session.rollback()
                raise
            finally:
                if self._per_use:
                    await self.close()

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        try:
            await session.close()
        except SQLAlchemyError:
            # A sibling field failed under a non-null parent and graphql-core cancelled
            # this operation's statement mid-flight: the pool has already discarded the
            # connection, and the rollback on close has nothing left to talk to.
            log.debug("discarding a session whose connection was lost", exc_info=True)


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

    async def close(self) -> None:
        await self.db.close()
        # Loaders cache per operation (a websocket's context outlives many); dropping them
        # also breaks the loader -> context cycle, so a request's objects are freed at once.
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
        return bearer_token(self.request.headers.get("authorization"))

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
        from mediagraph.dataloaders.users import FreshUserByIdLoader

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
    def client_address(self) -> str:
        if self.request is None or self.request.client is None:
            return "unknown"
        return self.request.client.host
