"""The executable schema: the public types with error codes, masking and the document cache."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from typing import Any

import strawberry
from graphql import GraphQLError
from strawberry.schema.config import StrawberryConfig
from strawberry.types import ExecutionContext, ExecutionResult

from mediagraph.schema import NODE_TYPES, Mutation, Query, Subscription
from mediagraph.schema.extensions import CloseOperationSession, coded, is_internal
from mediagraph.schema.scalars import SCALARS
from mediagraph.serving.documents import CachedDocuments, DocumentCache
from mediagraph.settings import Settings, get_settings

log = logging.getLogger("mediagraph.errors")


class MediagraphSchema(strawberry.Schema):
    # Parsed and validated documents, shared by the HTTP fast path and Strawberry's own path.
    documents: DocumentCache

    async def execute(self, *args: Any, **kwargs: Any) -> ExecutionResult:
        # Codes are applied to the final result rather than in an extension hook:
        # errors raised while an extension runs (token limits, parsing) skip the hooks.
        result = await super().execute(*args, **kwargs)
        if result.errors:
            result.errors = [coded(error) for error in result.errors]
        return result

    async def stream(self, *args: Any, **kwargs: Any) -> Any:
        # Every streaming transport (both websocket subprotocols, shared subscriptions, and
        # `subscribe`, which calls this) sends results with the same codes and masking as HTTP.
        return _coded_stream(await super().stream(*args, **kwargs))

    def process_errors(self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None) -> None:
        # User errors are answers, not incidents: only unexpected failures are logged.
        for error in errors:
            if is_internal(error):
                log.error("internal error", exc_info=error.original_error)


def build_schema(settings: Settings | None = None) -> MediagraphSchema:
    settings = settings or get_settings()
    schema = MediagraphSchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        types=NODE_TYPES,
        extensions=[CloseOperationSession, CachedDocuments],
        config=StrawberryConfig(scalar_map=SCALARS),
    )
    schema.documents = DocumentCache(schema._schema, settings)
    return schema


async def _coded_stream(results: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
    try:
        async for result in results:
            if getattr(result, "errors", None):
                result.errors = [coded(error) for error in result.errors]
            yield result
    finally:
        await results.aclose()
