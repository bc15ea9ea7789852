"""Runs an execution plan with graphql-core's semantics and Strawberry's resolvers.

Mirrors graphql-core's Executor step for step: resolvers are the schema's own
(called with the same ResolveInfo Strawberry's executor builds, or without one for
plain attribute fields, whose resolver ignores it); errors are located and
collected the same way, a non-null field's error nulls its nearest nullable
parent, and sibling awaitables run concurrently (so dataloaders batch as before).
What it skips is re-deriving the document per field: see `serving/plans.py`.
"""

from __future__ import annotations

import types
from asyncio import gather, isfuture
from collections.abc import Awaitable, Generator, Sequence
from types import CoroutineType
from typing import Any

from graphql import ExecutionResult, GraphQLError, GraphQLSchema, located_error
from graphql.execution.executor import CollectedErrors
from graphql.execution.values import VariableValues, get_argument_values
from graphql.pyutils import Path, Undefined, gather_with_cancel, inspect, is_iterable
from graphql.type.definition import GraphQLResolveInfoHelpers
from strawberry.execution import optimized_is_awaitable as is_awaitable
from strawberry.schema.schema import _OperationContextAwareGraphQLResolveInfo as ResolveInfo

from mediagraph.serving.plans import Completion, FieldPlan, ObjectPlan, OperationPlan

# Values that are never awaitable, checked inline before the general test on the hot paths.
PLAIN = frozenset({str, int, float, bool, type(None), dict, list, tuple})


class PlanExecution:
    def __init__(
        self,
        schema: GraphQLSchema,
        plan: OperationPlan,
        context: Any,
        variables: VariableValues,
        extensions: dict[str, Any] | None,
    ) -> None:
        self.schema = schema
        self.plan = plan
        self.context = context
        self.variables = variables
        self.extensions = extensions
        self.errors = CollectedErrors()

    def run(self) -> ExecutionResult | Awaitable[ExecutionResult]:
        try:
            if self.plan.serial:
                data = self.execute_fields_serially(self.plan.root)
            else:
                data = self.execute_fields(self.plan.root, None, None)
        except GraphQLError as error:
            self.errors.add(error, None)
            return ExecutionResult(None, self.errors.errors or None)
        if not is_awaitable(data):
            return ExecutionResult(data, self.errors.errors or None)

        async def finish() -> ExecutionResult:
            try:
                awaited = await data
            except GraphQLError as error:
                self.errors.add(error, None)
                return ExecutionResult(None, self.errors.errors or None)
            return ExecutionResult(awaited, self.errors.errors or None)

        return finish()

    def execute_fields(self, plan: ObjectPlan, source: Any, path: Path | None) -> Any:
        results: dict[str, Any] = {}
        pending: list[str] = []
        try:
            for field in plan.fields:
                inline = field.inline
                if inline is not None:
                    # The common case of a scalar read off the source, completed here with no
                    # call per field; anything unusual (None, a failure) takes the general path.
                    try:
                        value = getattr(source, inline.attribute)
                        if value is not None:
                            if inline.many:
                                if type(value) is list:
                                    coerce = inline.coerce
                                    coerced = [coerce(item) for item in value]
                                    if None not in coerced and Undefined not in coerced:
                                        results[field.key] = coerced
                                        continue
                            else:
                                coerced = inline.coerce(value)
                                if coerced is not None and coerced is not Undefined:
                                    results[field.key] = coerced
                                    continue
                        elif inline.nullable:
                            results[field.key] = None
                            continue
                    except Exception:  # the general path below raises it where it belongs
                        pass
                value = self.execute_field(field, source, path)
                results[field.key] = value
                if type(value) not in PLAIN and is_awaitable(value):
                    pending.append(field.key)
        except Exception:
            if pending:
                _track([results[key] for key in pending])
            raise
        if not pending:
            return results
        return _settle(results, pending)

    def execute_fields_serially(self, plan: ObjectPlan) -> Any:
        """A mutation's root fields: each resolved and completed before the next one starts."""
        results: dict[str, Any] = {}
        for at, field in enumerate(plan.fields):
            value = self.execute_field(field, None, None)
            if type(value) not in PLAIN and is_awaitable(value):
                return self._finish_serially(plan, at, value, results)
            results[field.key] = value
        return results

    async def _finish_serially(self, plan: ObjectPlan, at: int, pending: Any, results: dict[str, Any]) -> Any:
        results[plan.fields[at].key] = await pending
        for field in plan.fields[at + 1 :]:
            value = self.execute_field(field, None, None)
            if type(value) not in PLAIN and is_awaitable(value):
                value = await value
            results[field.key] = value
        return results

    def execute_field(self, field: FieldPlan, source: Any, parent_path: Path | None) -> Any:
        if field.typename:
            return field.parent_type.name
        completion: Completion = field.completion  # type: ignore[assignment]
        resolve = field.definition.resolve  # type: ignore[union-attr]
        prefetched = field.prefetched
        if prefetched is not None and getattr(source, prefetched, None) is not None:
            # A computed field whose value the source already holds: no resolver, no info.
            path = Path(parent_path, field.key, field.parent_type.name)
            try:
                completed = self.complete_value(completion, field, None, path, getattr(source, prefetched))
                if is_awaitable(completed):
                    return self.settle(completion, field, path, completed)
                return completed
            except Exception as raw_error:
                self.field_error(raw_error, field, completion, path)
                return None
        if field.basic and completion.leaf is not None:
            # Plain attribute with a scalar value: no info, and a path only if it fails.
            try:
                attribute = field.attribute
                result = getattr(source, attribute) if attribute is not None else resolve(source, None)  # type: ignore[misc]
                if type(result) in PLAIN or not is_awaitable(result):
                    return self.complete_value(completion, field, None, None, result)
            except Exception as raw_error:
                self.field_error(raw_error, field, completion, Path(parent_path, field.key, field.parent_type.name))
                return None
            return self.complete_awaitable(
                completion, field, None, Path(parent_path, field.key, field.parent_type.name), result
            )
        path = Path(parent_path, field.key, field.parent_type.name)
        info = None if field.basic else self.resolve_info(field, path)
        try:
            if field.basic:
                attribute = field.attribute
                result = getattr(source, attribute) if attribute is not None else resolve(source, None)  # type: ignore[misc]
            else:
                values = field.arguments
                arguments = values.values(self.variables) if values is not None else None
                if arguments is None:
                    arguments = get_argument_values(field.definition, field.node, self.variables)  # type: ignore[arg-type]
                direct = field.direct
                result = direct(source, info, arguments) if direct is not None else resolve(source, info, **arguments)  # type: ignore[misc]
                if type(result) is CoroutineType:
                    # Run the resolver up to its first real wait now, as an eager task would:
                    # one that finds everything ready (a loader's cached row) completes here,
                    # with no task and no trip through the event loop.
                    try:
                        waiting_on = result.send(None)
                    except StopIteration as finished:
                        result = finished.value
                    except Exception as raw_error:
                        # graphql-core meets a coroutine's failure only once every sibling has
                        # started: raised here, a non-null field's error would skip the siblings
                        # after it (and their errors), and a nullable one's would come too early.
                        return self.complete_awaitable(completion, field, info, path, _failed(raw_error))
                    else:
                        if isfuture(waiting_on):
                            # Taken, as a task takes it, so another resolver may await the same future.
                            waiting_on._asyncio_future_blocking = False
                        return self.complete_awaitable(completion, field, info, path, _resume(result, waiting_on))
            if is_awaitable(result):
                return self.complete_awaitable(completion, field, info, path, result)
            completed = self.complete_value(completion, field, info, path, result)
            if is_awaitable(completed):
                return self.settle(completion, field, path, completed)
            return completed
        except Exception as raw_error:
            self.field_error(raw_error, field, completion, path)
            return None

    def resolve_info(self, field: FieldPlan, path: Path) -> Any:
        return ResolveInfo(
            field.name,
            field.nodes,
            field.definition.type,  # type: ignore[union-attr]
            field.parent_type,
            path,
            self.schema,
            self.plan.fragments,
            None,
            self.plan.operation,
            self.variables.coerced,
            self.context,
            is_awaitable,
            None,
            HELPERS,
            self.extensions,  # type: ignore[arg-type]  # None without extensions, as Strawberry passes it
        )

    def field_error(self, raw_error: Exception, field: FieldPlan, completion: Completion, path: Path) -> None:
        """Collect the error (the field becomes null), or raise it to null the parent of a non-null field."""
        error = located_error(raw_error, field.nodes, path.as_list())
        if completion.non_null:
            raise error
        self.errors.add(error, path)

    async def complete_awaitable(
        self, completion: Completion, field: FieldPlan, info: Any, path: Path, result: Any
    ) -> Any:
        try:
            resolved = await result
            completed = self.complete_value(completion, field, info, path, resolved)
            if is_awaitable(completed):
                completed = await completed
        except Exception as raw_error:
            self.field_error(raw_error, field, completion, path)
            completed = None
        return completed

    async def settle(self, completion: Completion, field: FieldPlan, path: Path, completed: Any) -> Any:
        try:
            return await completed
        except Exception as raw_error:
            self.field_error(raw_error, field, completion, path)
            return None

    def complete_value(
        self, completion: Completion, field: FieldPlan, info: Any, path: Path | None, result: Any
    ) -> Any:
        if isinstance(result, Exception):
            raise result
        if result is None or result is Undefined:
            if completion.non_null:
                raise TypeError(field.null_message)
            return None
        if completion.leaf is not None:
            coerced = completion.leaf.coerce_output_value(result)
            if coerced is Undefined or coerced is None:
                raise TypeError(
                    f"Expected `{inspect(completion.leaf)}.coerce_output_value("
                    f"{inspect(result)})` to return non-nullable value, returned: {inspect(coerced)}"
                )
            return coerced
        if completion.item is not None:
            return self.complete_list(completion.item, field, info, path, result)
        object_plan: ObjectPlan = completion.object  # type: ignore[assignment]
        object_type = object_plan.type
        if object_type.is_type_of is not None and not object_type.is_type_of(result, info):
            raise GraphQLError(f"Expected value of type '{object_type}' but got: {inspect(result)}.", field.nodes)
        return self.execute_fields(object_plan, result, path)

    def complete_list(self, item: Completion, field: FieldPlan, info: Any, path: Path | None, result: Any) -> Any:
        if hasattr(result, "__aiter__"):
            return self.complete_async_list(item, field, info, path, result)
        if not is_iterable(result):
            raise GraphQLError(f"Expected Iterable, but did not find one for field '{field.label}'.")
        completed: list[Any] = []
        pending: list[int] = []
        try:
            for index, value in enumerate(result):
                if item.leaf is not None and (type(value) in PLAIN or not is_awaitable(value)):
                    # Scalars in a list: the item's path is only needed for an error.
                    try:
                        completed.append(self.complete_value(item, field, info, None, value))
                    except Exception as raw_error:
                        self.field_error(raw_error, field, item, Path(path, index, None))
                        completed.append(None)
                    continue
                item_path = Path(path, index, None)
                if is_awaitable(value):
                    completed.append(self.complete_awaitable(item, field, info, item_path, value))
                    pending.append(index)
                    continue
                try:
                    done = self.complete_value(item, field, info, item_path, value)
                    if is_awaitable(done):
                        done = self.settle(item, field, item_path, done)
                        pending.append(index)
                except Exception as raw_error:
                    self.field_error(raw_error, field, item, item_path)
                    done = None
                completed.append(done)
        except Exception:
            if pending:
                _track([completed[index] for index in pending])
            raise
        if not pending:
            return completed
        return _settle(completed, pending)

    async def complete_async_list(
        self, item: Completion, field: FieldPlan, info: Any, path: Path | None, result: Any
    ) -> list[Any]:
        values = [value async for value in result]
        completed = self.complete_list(item, field, info, path, values)
        return await completed if is_awaitable(completed) else completed  # type: ignore[no-any-return]


async def _settle(values: Any, pending: list[Any]) -> Any:
    """`values` (a dict or a list) with the awaitables at `pending` replaced by their results, awaited together."""
    if len(pending) == 1:
        values[pending[0]] = await values[pending[0]]
    else:
        settled = await gather_with_cancel(*(values[key] for key in pending))
        for key, value in zip(pending, settled, strict=True):
            values[key] = value
    return values


async def _failed(error: Exception) -> Any:
    raise error


@types.coroutine
def _resume(coroutine: CoroutineType[Any, Any, Any], waiting_on: Any) -> Generator[Any, Any, Any]:
    """Drive a coroutine already started by hand, from the wait it stopped at (`yield from`, resumed)."""
    if isfuture(waiting_on):
        # Handed to the task that runs this, as the coroutine handed it before it was taken.
        waiting_on._asyncio_future_blocking = True
    while True:
        try:
            sent = yield waiting_on
        except BaseException as thrown:  # cancellation, passed on to the resolver
            try:
                waiting_on = coroutine.throw(thrown)
            except StopIteration as finished:
                return finished.value
        else:
            try:
                waiting_on = coroutine.send(sent)
            except StopIteration as finished:
                return finished.value


async def _gather(values: Sequence[Awaitable[Any]]) -> list[Any]:
    return await gather_with_cancel(*values)


# Settling in the background: work left behind by a bubbling error still runs to
# completion and its errors are observed, as graphql-core does.
_BACKGROUND: set[Any] = set()


def _track(values: Sequence[Any]) -> None:
    awaitables = [value for value in values if is_awaitable(value)]
    if awaitables:
        future = gather(*awaitables, return_exceptions=True)
        _BACKGROUND.add(future)
        future.add_done_callback(_BACKGROUND.discard)


# Module-level, so an execution holds no reference cycle through bound methods.
HELPERS = GraphQLResolveInfoHelpers(gather=_gather, track=_track)
