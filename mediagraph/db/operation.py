"""One main-database session per GraphQL operation, shared by its resolvers and loaders."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

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
