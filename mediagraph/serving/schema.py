"""The executable schema: the public types with error codes, masking and the document cache."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Iterator
from time import perf_counter
from typing import Any

import strawberry
from graphql import GraphQLError
from strawberry.extensions import SchemaExtension
from strawberry.schema.config import StrawberryConfig
from strawberry.types import ExecutionContext, ExecutionResult
from strawberry.types.graphql import OperationType

from mediagraph.observability import metrics, request_ids, tracing
from mediagraph.observability.operations import OperationReporter
from mediagraph.schema import NODE_TYPES, Mutation, Query, Subscription
from mediagraph.schema.extensions import CloseOperationSession, coded, is_internal, is_unavailable
from mediagraph.schema.scalars import SCALARS
from mediagraph.serving.documents import CachedDocuments, DocumentCache
from mediagraph.settings import Settings, get_settings

log = logging.getLogger("mediagraph.errors")


class MediagraphSchema(strawberry.Schema):
    # Parsed and validated documents, shared by the HTTP fast path and Strawberry's own path.
    documents: DocumentCache
    # Where both paths report finished operations (latency, slow-operation log).
    operations: OperationReporter

    async def execute(self, *args: Any, **kwargs: Any) -> ExecutionResult:
        # Codes are applied to the final result rather than in an extension hook:
        # errors raised while an extension runs (token limits, parsing) skip the hooks.
        result = await super().execute(*args, **kwargs)
        if result.errors:
            result.errors = reported(result.errors)
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
            elif is_unavailable(error):
                log.warning("backing service unavailable: %r", error.original_error)


def build_schema(settings: Settings | None = None) -> MediagraphSchema:
    settings = settings or get_settings()
    schema = MediagraphSchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        types=NODE_TYPES,
        extensions=[CloseOperationSession, CachedDocuments, OperationMetrics],
        config=StrawberryConfig(scalar_map=SCALARS),
    )
    schema.documents = DocumentCache(schema._schema, settings)
    schema.operations = OperationReporter(settings)
    return schema


def reported(errors: list[GraphQLError], *, tag: bool = True) -> list[GraphQLError]:
    """Errors as clients get them (coded, masked, with the request id when `tag`), counted by code.

    Websocket results carry no request id: one connection's id must not reach the other
    subscribers a shared stream's results go to.
    """
    coded_errors = [coded(error) for error in errors]
    for error in coded_errors if tag else ():
        error.extensions = request_ids.tagged(error.extensions)
    metrics.count_error_codes((error.extensions or {}).get("code") for error in coded_errors)
    return coded_errors


class OperationMetrics(SchemaExtension):
    """Times (and, with tracing on, traces) queries and mutations on Strawberry's path (uploads,
    websockets); subscriptions live on, and are counted as active subscriptions instead."""

    def on_execute(self) -> Iterator[None]:
        context = self.execution_context
        if not tracing.enabled() or context.operation_type is OperationType.SUBSCRIPTION:
            yield
            return
        connection = getattr(context.context, "request", None)
        with tracing.operation_span(connection.scope["headers"] if connection is not None else None) as span:
            yield
            errors = context.result.errors if context.result is not None else None
            documents: DocumentCache = context.schema.documents  # type: ignore[attr-defined]
            span.finished(
                context.operation_type.value,
                context.operation_name,
                [(error.extensions or {}).get("code") for error in errors or ()],
                cost=documents.cost_of(context.query, context.operation_name, context.variables),
            )

    def on_operation(self) -> Iterator[None]:
        started = perf_counter()
        yield
        context = self.execution_context
        try:
            operation_type = context.operation_type
        except Exception:
            return  # no document: a parse error, already counted with the errors
        if operation_type is not OperationType.SUBSCRIPTION:
            errors = len(context.result.errors or ()) if context.result is not None else 0
            reporter: OperationReporter = context.schema.operations  # type: ignore[attr-defined]
            reporter.finished(operation_type.value, context.operation_name, perf_counter() - started, errors=errors)
            metrics.count_execution(planned=False)


async def _coded_stream(results: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
    try:
        async for result in results:
            if getattr(result, "errors", None):
                result.errors = reported(result.errors, tag=False)
            yield result
    finally:
        await results.aclose()
