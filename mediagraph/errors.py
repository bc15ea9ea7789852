"""Errors users can cause, each carrying its `extensions.code`.

Anything else raised while resolving is an internal error and is masked by
`schema.extensions.ErrorCodes` before it leaves the server.
"""

from __future__ import annotations

from typing import Any, ClassVar


class UserError(Exception):
    code: ClassVar[str] = "BAD_USER_INPUT"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        # graphql-core copies `extensions` from the original error onto the GraphQLError.
        self.extensions: dict[str, Any] = {"code": self.code, **details}


class BadUserInput(UserError):
    code = "BAD_USER_INPUT"


class Unauthenticated(UserError):
    code = "UNAUTHENTICATED"


class Forbidden(UserError):
    code = "FORBIDDEN"


class NotFound(UserError):
    code = "NOT_FOUND"


class Conflict(UserError):
    code = "CONFLICT"


class RateLimited(UserError):
    code = "RATE_LIMITED"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, retryAfter=retry_after)


class PersistedQueryNotFound(UserError):
    code = "PERSISTED_QUERY_NOT_FOUND"


class ServiceUnavailable(UserError):
    """A backing store (a shard, Redis) cannot answer; the rest of the response still can."""

    code = "SERVICE_UNAVAILABLE"


class CursorExpired(UserError):
    """The pagination session behind a cursor ended (unused too long): start again without `after`."""

    code = "CURSOR_EXPIRED"
