"""Error codes and masking for every result, the per-operation session cleanup, sharing metadata."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

from graphql import GraphQLError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from strawberry.exceptions import StrawberryInputCoercionError
from strawberry.extensions import SchemaExtension
from strawberry.types import StreamExecutionResult

from mediagraph.db.availability import database_unreachable
from mediagraph.errors import ServiceUnavailable, UserError

log = logging.getLogger("mediagraph.errors")

INTERNAL_MESSAGE = "Internal server error."
# Redis could not be reached even after the pool's retry on a fresh connection: an outage,
# not a bug, and the client may try again.
UNAVAILABLE_ERRORS = (RedisConnectionError, RedisTimeoutError)
UNAVAILABLE_MESSAGE = "A backing service is unavailable; try again shortly."

# Metadata for `strawberry.subscription(metadata=SHARED_STATE)`: results are the same for everyone,
# so identical subscriptions may share one execution (`serving/sharing.py`).
SHARED_STATE = {"shared_state": True}
# Metadata for a field whose value depends on who asks (`viewerHasLiked`, owner-only figures):
# a subscription that selects one is executed per subscriber, never shared.
VIEWER_DEPENDENT = {"viewer_dependent": True}
# Metadata for a field built from the request's origin (absolute URLs) unless `public_url` is set:
# without it, a subscription that selects one is executed per subscriber, each on its own origin.
ORIGIN_DEPENDENT = {"origin_dependent": True}
# Metadata key naming the attribute where an object may already hold a computed field's value
# (a page reads its items' counts with the rows): execution plans read it and run the resolver
# only when it is None. See `prefetched()`.
PREFETCHED = "prefetched"


def prefetched(attribute: str) -> dict[str, str]:
    """Metadata for a field whose resolver returns `attribute` when set, so a plan may read it directly."""
    return {PREFETCHED: attribute}


def coded(error: GraphQLError) -> GraphQLError:
    """The error as clients see it: user errors keep their code, the rest is masked."""
    original = error.original_error
    if isinstance(original, UserError):
        return error
    if isinstance(original, StrawberryInputCoercionError):
        # A variable a scalar cannot parse (a malformed UUID or DateTime): the caller's input.
        return _recoded(error, error.message, {"code": "BAD_USER_INPUT"})
    if original is None or isinstance(original, GraphQLError):
        # Raised by graphql-core itself: syntax, validation, variable coercion (which names the
        # inner error, "a value of non-null type 'ID!' to be provided", as its original), limits.
        code = "GRAPHQL_PARSE_FAILED" if error.message.startswith("Syntax Error") else "GRAPHQL_VALIDATION_FAILED"
        if error.extensions and "code" in error.extensions:
            return error
        return _recoded(error, error.message, {**(error.extensions or {}), "code": code})
    if isinstance(original, UNAVAILABLE_ERRORS) or database_unreachable(original):
        return _recoded(error, UNAVAILABLE_MESSAGE, {"code": ServiceUnavailable.code})
    return _recoded(error, INTERNAL_MESSAGE, {"code": "INTERNAL_SERVER_ERROR"})


def _recoded(error: GraphQLError, message: str, extensions: dict[str, object]) -> GraphQLError:
    return GraphQLError(
        message,
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        extensions=extensions,
    )


def is_internal(error: GraphQLError) -> bool:
    original = error.original_error
    return original is not None and not (
        isinstance(
            original, GraphQLError | UserError | StrawberryInputCoercionError | RedisConnectionError | RedisTimeoutError
        )
        or database_unreachable(original)
    )


def is_unavailable(error: GraphQLError) -> bool:
    """An outage of Redis or PostgreSQL (answered SERVICE_UNAVAILABLE), worth a warning in the log."""
    original = error.original_error
    return original is not None and (isinstance(original, UNAVAILABLE_ERRORS) or database_unreachable(original))


class CloseOperationSession(SchemaExtension):
    async def on_operation(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            close = getattr(self.execution_context.context, "close", None)
            if close is not None:
                await close()

    def on_stream_result(self, result: StreamExecutionResult) -> Iterator[None]:
        yield
        # A subscription is one operation that lives on: what its loaders read for one push
        # (a media's counts, a user's nickname) must not be served again in the next one.
        forget = getattr(self.execution_context.context, "forget_loaded", None)
        if forget is not None:
            forget()
