"""Error codes and masking for every result, cached documents, and the per-operation session cleanup."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from graphql import GraphQLError
from strawberry.exceptions import StrawberryInputCoercionError
from strawberry.extensions import SchemaExtension

from mediagraph.errors import UserError

if TYPE_CHECKING:
    from mediagraph.serving.documents import PreparedDocument

log = logging.getLogger("mediagraph.errors")

INTERNAL_MESSAGE = "Internal server error."


def coded(error: GraphQLError) -> GraphQLError:
    """The error as clients see it: user errors keep their code, the rest is masked."""
    original = error.original_error
    if isinstance(original, UserError):
        return error
    if isinstance(original, StrawberryInputCoercionError):
        # A variable a scalar cannot parse (a malformed UUID or DateTime): the caller's input.
        return _recoded(error, error.message, {"code": "BAD_USER_INPUT"})
    if original is None:
        # Raised by graphql-core itself: syntax, validation, variable coercion, limits.
        code = "GRAPHQL_PARSE_FAILED" if error.message.startswith("Syntax Error") else "GRAPHQL_VALIDATION_FAILED"
        if error.extensions and "code" in error.extensions:
            return error
        return _recoded(error, error.message, {**(error.extensions or {}), "code": code})
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
    return error.original_error is not None and not isinstance(
        error.original_error, UserError | StrawberryInputCoercionError
    )


class CloseOperationSession(SchemaExtension):
    async def on_operation(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            close = getattr(self.execution_context.context, "close", None)
            if close is not None:
                await close()


class CachedDocuments(SchemaExtension):
    """Strawberry's own path (uploads, websockets) served from the schema's document cache.

    The HTTP fast path reads the same cache, so a document is parsed, validated and
    checked against the limits once, whichever path first sees it.
    """

    def __init__(self) -> None:
        self.prepared: PreparedDocument | None = None

    def on_operation(self) -> Iterator[None]:
        # Should the cache refuse the text, Strawberry parses it itself, under the same limit.
        self.execution_context.parse_options["max_tokens"] = self.execution_context.schema.documents.max_tokens  # type: ignore[attr-defined]
        yield

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        if context.query is not None and context.graphql_document is None:
            try:
                self.prepared = context.schema.documents.prepare(context.query)  # type: ignore[attr-defined]
            except GraphQLError:
                # Left to Strawberry's parse, which reports the error the usual way.
                self.prepared = None
            else:
                context.graphql_document = self.prepared.document
        yield

    def on_validate(self) -> Iterator[None]:
        if self.prepared is not None:
            self.execution_context.pre_execution_errors = list(self.prepared.errors)
        yield
