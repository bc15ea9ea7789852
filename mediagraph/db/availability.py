"""Whether a failure means PostgreSQL could not be reached (an outage), rather than a bug.

Such failures reach clients as SERVICE_UNAVAILABLE, which they may retry, instead of a
masked internal error: a refused or dropped connection, a pool with none to give, a server
shutting down or starting up (SQLSTATE classes 08 and 57P) or out of connection slots
(53300), through SQLAlchemy or asyncpg.
"""

from __future__ import annotations

import asyncpg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import InterfaceError as SQLAlchemyInterfaceError
from sqlalchemy.exc import TimeoutError as PoolTimeout

UNREACHABLE_SQLSTATES = ("08", "57P", "53300")
UNREACHABLE = (
    ConnectionError,  # refused, reset, aborted
    TimeoutError,
    PoolTimeout,
    SQLAlchemyInterfaceError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.PostgresConnectionError,
)


def database_unreachable(error: BaseException) -> bool:
    if isinstance(error, UNREACHABLE):
        return True
    if isinstance(error, DBAPIError):
        return error.connection_invalidated or (error.orig is not None and database_unreachable(error.orig))
    state = getattr(error, "sqlstate", None)
    return isinstance(state, str) and state.startswith(UNREACHABLE_SQLSTATES)
