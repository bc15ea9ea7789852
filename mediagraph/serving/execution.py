"""One GraphQL request run the way Strawberry's view runs it, minus its per-request machinery.

The same schema, context, error codes and masking, error logging, operation-type
rules and session cleanup; the document comes from the shared cache, the query
text may come from the persisted-query store, and graphql-core executes directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from time import perf_counter
from typing import Any

from graphql import ExecutionResult, GraphQLError, execute
from graphql.execution.values import get_variable_values
from starlette.requests import Request
from starlette.responses import Response
from strawberry.execution import optimized_is_awaitable
from strawberry.schema.exceptions import CannotGetOperationTypeError, InvalidOperationTypeError
from strawberry.types.graphql import OperationType

from mediagraph.context import Context
from mediagraph.errors import BadUserInput, UserError
from mediagraph.observability import metrics, tracing
from mediagraph.schema.extensions import coded
from mediagraph.services import Services
from mediagraph.serving.cost import report, wants_report
from mediagraph.serving.documents import Operation, PreparedDocument
from mediagraph.serving.executor import PlanExecution
from mediagraph.serving.persisted import PersistedQueries, query_hash, requested_hash
from mediagraph.serving.requests import GraphQLRequest, RequestRefused
from mediagraph.serving.schema import MediagraphSchema

# Subscriptions are served over graphql-transport-ws on the same URL, never over plain HTTP.
ALLOWED_OPERATIONS = {
    "GET": frozenset({OperationType.QUERY}),
    "POST": frozenset({OperationType.QUERY, OperationType.MUTATION}),
}


def response_body(data: dict[str, Any] | None, errors: Sequence[GraphQLError] | None) -> dict[str, Any]:
    if errors:
        return {"data": data, "errors": [coded(error).formatted for error in errors]}
    return {"data": data}


class OperationRunner:
    def __init__(self, schema: MediagraphSchema, persisted: PersistedQueries, *, plans: bool = True) -> None:
        self.schema = schema
        self.plans = plans
        self.graphql_schema = schema._schema
        self.executor_class = schema.execution_context_class
        self.persisted = persisted

    async def _query_text(self, services: Services, request: GraphQLRequest) -> tuple[str, str | None]:
        """The text to run, and the hash to register it under once it validates."""
        digest = requested_hash(request.extensions)
        if digest is None:
            if request.query is None:
                raise RequestRefused(400, "No GraphQL query found in the request")
            return request.query, None
        if request.query is None:
            return await self.persisted.lookup(services.redis, services.keys, digest), None
        if query_hash(request.query) != digest:
            raise BadUserInput("`extensions.persistedQuery.sha256Hash` is not the SHA-256 of `query`.")
        return request.query, digest

    async def run(
        self, request: GraphQLRequest, *, method: str, http: Request, services: Services, sub_response: Response
    ) -> dict[str, Any]:
        """The response body; raises RequestRefused where Strawberry answers with a plain HTTP error."""
        started = perf_counter()
        if tracing.enabled():
            with tracing.operation_span(http.scope["headers"]) as span:
                body, operation, cost = await self._run(request, method, http, services, sub_response)
                span.finished(
                    operation.type.value if operation else None,
                    operation.name if operation else None,
                    [(error.get("extensions") or {}).get("code") for error in body.get("errors") or ()],
                    cost=cost,
                )
        else:
            body, operation, _ = await self._run(request, method, http, services, sub_response)
        errors = body.get("errors")
        if errors:
            metrics.count_response_errors(errors)
        if operation is not None:
            self.schema.operations.finished(
                operation.type.value, operation.name, perf_counter() - started, errors=len(errors) if errors else 0
            )
        return body

    async def _run(
        self, request: GraphQLRequest, method: str, http: Request, services: Services, sub_response: Response
    ) -> tuple[dict[str, Any], Operation | None, int | None]:
        """The body, the operation run (None before one is known) and its cost (None before it is priced)."""
        try:
            query, register_as = await self._query_text(services, request)
        except UserError as error:
            return response_body(None, [GraphQLError(error.message, original_error=error)]), None, None
        try:
            prepared = self.schema.documents.prepare(query)
        except GraphQLError as error:
            return response_body(None, [error]), None, None
        try:
            operation = prepared.operation(request.operation_name)
        except CannotGetOperationTypeError as error:
            raise RequestRefused(400, error.as_http_error_reason()) from None
        if operation.type not in ALLOWED_OPERATIONS[method]:
            raise RequestRefused(400, InvalidOperationTypeError(operation.type).as_http_error_reason(method))
        if prepared.errors:
            return response_body(None, prepared.errors), operation, None
        cost, refused = self.schema.documents.priced(prepared, operation.name, request.variables)
        if refused is not None:
            return response_body(None, [refused]), operation, cost
        if register_as is not None:
            await self.persisted.register(services.redis, services.keys, register_as, query)
        body = await self._execute(prepared, operation, request, http, services, sub_response)
        if wants_report(request.extensions):
            body["extensions"] = report(cost, self.schema.documents.max_cost)
        return body, operation, cost

    def _start(
        self, prepared: PreparedDocument, operation: Operation, request: GraphQLRequest, context: Context
    ) -> Any:
        plan = prepared.plan(self.graphql_schema, operation) if self.plans else None
        metrics.count_execution(planned=plan is not None)
        if plan is None:
            return execute(
                self.graphql_schema,
                prepared.document,
                context_value=context,
                variable_values=request.variables,
                operation_name=operation.name,
                is_awaitable=optimized_is_awaitable,  # type: ignore[arg-type]
                executor_class=self.executor_class,
                operation_extensions=request.extensions,
            )
        inputs = request.variables or {}
        variables = plan.variables.coerce(inputs) if plan.variables is not None else None
        if variables is None:
            coerced = get_variable_values(
                self.graphql_schema, plan.operation.variable_definitions or (), inputs, max_errors=50
            )
            if isinstance(coerced, list):
                return ExecutionResult(None, coerced)
            variables = coerced
        return PlanExecution(self.graphql_schema, plan, context, variables, request.extensions).run()

    async def _execute(
        self,
        prepared: PreparedDocument,
        operation: Operation,
        request: GraphQLRequest,
        http: Request,
        services: Services,
        sub_response: Response,
    ) -> dict[str, Any]:
        context = Context(services, http)
        context.response = sub_response
        try:
            result: Any = self._start(prepared, operation, request, context)
            if optimized_is_awaitable(result):
                result = await result
            data, errors = result.data, result.errors
        except Exception as exc:
            data, errors = None, [GraphQLError(str(exc), original_error=exc)]
        finally:
            await context.close()
        if not errors:
            return {"data": data}
        self.schema.process_errors(errors)
        body = response_body(data, errors)
        _drop_tracebacks(errors)
        return body


def _drop_tracebacks(errors: Sequence[GraphQLError]) -> None:
    """Once logged and formatted, an error's traceback only keeps the request's frames in a
    reference cycle (frame -> error -> traceback -> frame) for the cyclic collector to find."""
    pending: list[BaseException] = list(errors)
    seen: set[int] = set()
    while pending:
        exception = pending.pop()
        if id(exception) in seen:
            continue
        seen.add(id(exception))
        exception.__traceback__ = None
        linked = (exception.__cause__, exception.__context__, getattr(exception, "original_error", None))
        pending.extend(other for other in linked if isinstance(other, BaseException))
