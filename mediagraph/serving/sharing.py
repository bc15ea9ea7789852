"""Identical state subscriptions, executed once per process however many clients ask.

Ten thousand dashboards watching one media's view count all ask the same question.
Run per subscriber, every update would execute the resolver, the GraphQL result and
its JSON ten thousand times. Here the first subscriber starts one shared stream and
later ones join it: each result is executed and encoded once, and only the operation
id differs per subscriber. A joiner gets the stream's latest result at once, which is
what it would have got alone: a state subscription answers with the current state
first.

Only root fields whose strawberry definition carries `SHARED_STATE` qualify: their
results must not depend on who asks (no viewer, no per-connection arguments). A
document that also selects a field marked `VIEWER_DEPENDENT` (`viewerHasLiked` on a
pushed media) runs per subscriber, so each sees their own value; so does one selecting
a field marked `ORIGIN_DEPENDENT` (`contentUrl`) unless `public_url` fixes the origin.

Results are written to every socket straight from the stream's task; a socket that
cannot take one at once is left to its own task and holds at most the newest result,
so a slow client only ever delays itself and costs one payload.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from graphql import (
    BREAK,
    DocumentNode,
    FieldNode,
    GraphQLError,
    GraphQLField,
    OperationDefinitionNode,
    TypeInfo,
    TypeInfoVisitor,
    Visitor,
    visit,
)
from strawberry.schema.exceptions import CannotGetOperationTypeError
from strawberry.types.execution import ExecutionResult, PreExecutionError
from strawberry.types.graphql import OperationType
from strawberry.utils.aio import aclosing

from mediagraph.observability import metrics

if TYPE_CHECKING:
    from mediagraph.context import Context
    from mediagraph.serving.schema import MediagraphSchema

log = logging.getLogger(__name__)

DEFINITION_BACKREF = "strawberry-definition"
INCREMENTAL_DELIVERY = "Incremental delivery is not supported over graphql-transport-ws"


@dataclass(frozen=True, slots=True)
class StreamKey:
    query: str
    operation_name: str | None
    variables: bytes


@dataclass(frozen=True, slots=True)
class Ending:
    """How a stream ended: `complete`, or `error` with its payload (errors before execution)."""

    type: str
    payload: str | None = None


COMPLETE = Ending("complete")


class Subscriber:
    """One operation on one socket, fed by a shared stream.

    A result is written to the socket right away, from the stream's task, as long as
    the socket takes it without waiting (the usual case): waking ten thousand tasks to
    do it would cost more than the writes. A send that has to wait (the client reads
    slowly and the socket's buffer is full) is finished by the subscriber's own task,
    and meanwhile only the newest result is kept for it.
    """

    __slots__ = ("busy", "ending", "failure", "pending", "ready", "send", "stalled")

    def __init__(self, send: Callable[[str], Coroutine[Any, Any, None]]) -> None:
        self.send = send
        self.pending: str | None = None
        self.stalled: tuple[Coroutine[Any, Any, None], Any] | None = None
        self.busy = False
        self.ending: Ending | None = None
        self.failure: BaseException | None = None
        self.ready = asyncio.Event()

    def offer(self, payload: str) -> None:
        if self.failure is not None:
            metrics.PUSHES_DROPPED.inc()
            return
        if self.busy:
            # Only the newest state is worth sending: it replaces one not sent yet.
            if self.pending is not None:
                metrics.PUSHES_COALESCED.inc()
            self.pending = payload
            return
        sending = self.send(payload)
        try:
            waiting_on = sending.send(None)
        except StopIteration:
            return
        except Exception as error:
            self.failure = error
            self.ready.set()
            return
        self.busy = True
        self.stalled = (sending, waiting_on)
        self.ready.set()

    def end(self, ending: Ending) -> None:
        self.ending = ending
        self.ready.set()

    async def deliver(self, send_ending: Callable[[Ending], Awaitable[None]]) -> None:
        """The subscriber's task: finishes sends that had to wait, then the ending."""
        while True:
            await self.ready.wait()
            self.ready.clear()
            if self.failure is not None:
                raise self.failure
            if self.stalled is not None:
                sending, waiting_on = self.stalled
                self.stalled = None
                await _Resumed(sending, waiting_on)
            while self.pending is not None:
                payload, self.pending = self.pending, None
                await self.send(payload)
            self.busy = False
            if self.ending is not None:
                await send_ending(self.ending)
                return


class _Resumed:
    """Awaits the rest of a coroutine that was started by hand and is waiting on `waiting_on`.

    The coroutine's own awaits keep working: what it waits on is passed up to the task
    awaiting this, and cancelling that task cancels the coroutine where it waits.
    """

    def __init__(self, coroutine: Coroutine[Any, Any, None], waiting_on: Any) -> None:
        self.coroutine = coroutine
        self.waiting_on = waiting_on

    def __await__(self) -> Generator[Any, None, None]:
        waiting_on = self.waiting_on
        while True:
            try:
                yield waiting_on
            except BaseException as error:
                try:
                    waiting_on = self.coroutine.throw(error)
                except StopIteration:
                    return
                continue
            try:
                waiting_on = self.coroutine.send(None)
            except StopIteration:
                return


class SharedStream:
    def __init__(self, key: StreamKey, on_done: Callable[[SharedStream], None]) -> None:
        self.key = key
        self.subscribers: set[Subscriber] = set()
        self.latest: str | None = None
        self.ending: Ending | None = None
        self._on_done = on_done
        self.task: asyncio.Task[None] | None = None

    def start(self, schema: MediagraphSchema, context: Context) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(schema, context))

    def add(self, subscriber: Subscriber) -> None:
        self.subscribers.add(subscriber)
        if self.latest is not None:
            subscriber.offer(self.latest)
        if self.ending is not None:
            subscriber.end(self.ending)

    def remove(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)
        if not self.subscribers and self.task is not None:
            # Nobody is left to tell: stop executing (a finished task ignores this).
            self.task.cancel()
            self._on_done(self)

    async def _run(self, schema: MediagraphSchema, context: Context) -> None:
        ending = COMPLETE
        try:
            ending = await self._publish_results(schema, context)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("shared subscription failed")
        finally:
            self._on_done(self)
        self.ending = ending
        for subscriber in self.subscribers:
            subscriber.end(ending)

    async def _publish_results(self, schema: MediagraphSchema, context: Context) -> Ending:
        variables = orjson.loads(self.key.variables)
        source = await schema.stream(
            self.key.query,
            variable_values=variables,
            context_value=context,
            operation_name=self.key.operation_name,
        )
        first = True
        async with aclosing(source):
            async for result in source:
                if first and isinstance(result, PreExecutionError):
                    return _error_ending(result.errors or [])
                if not isinstance(result, ExecutionResult):
                    return _error_ending([GraphQLError(INCREMENTAL_DELIVERY)])
                first = False
                self.latest = orjson.dumps(_next_payload(result)).decode()
                for subscriber in self.subscribers:
                    subscriber.offer(self.latest)
        return COMPLETE


class SharedStreams:
    """This process's shared streams, by query, operation name and variables."""

    def __init__(self, *, origin_fixed: bool = False) -> None:
        self._streams: dict[StreamKey, SharedStream] = {}
        # With `public_url` set, absolute URLs are the same for every subscriber.
        self._dependent_metadata = ("viewer_dependent",) if origin_fixed else ("viewer_dependent", "origin_dependent")

    def __len__(self) -> int:
        return len(self._streams)

    def key_for(
        self, schema: MediagraphSchema, query: str, operation_name: str | None, variables: object
    ) -> StreamKey | None:
        """The key to share this operation under, or None when it must run on its own."""
        if variables is not None and not isinstance(variables, dict):
            return None
        if not _is_shared_state(schema, query, operation_name, self._dependent_metadata):
            return None
        try:
            encoded = orjson.dumps(variables or {}, option=orjson.OPT_SORT_KEYS)
        except TypeError:
            return None
        return StreamKey(query, operation_name, encoded)

    async def follow(
        self,
        key: StreamKey,
        *,
        schema: MediagraphSchema,
        context: Context,
        send_next: Callable[[str], Coroutine[Any, Any, None]],
        send_ending: Callable[[Ending], Awaitable[None]],
    ) -> None:
        """Feed one subscriber from the shared stream until the stream ends or the task is cancelled."""
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = SharedStream(key, self._forget)
            stream.start(schema, context)
        subscriber = Subscriber(send_next)
        stream.add(subscriber)
        try:
            await subscriber.deliver(send_ending)
        finally:
            stream.remove(subscriber)

    def _forget(self, stream: SharedStream) -> None:
        if self._streams.get(stream.key) is stream:
            del self._streams[stream.key]


def _is_shared_state(
    schema: MediagraphSchema, query: str, operation_name: str | None, dependent_metadata: tuple[str, ...]
) -> bool:
    try:
        prepared = schema.documents.prepare(query)
        operation = prepared.operation(operation_name)
    except (GraphQLError, CannotGetOperationTypeError):
        return False
    if prepared.errors or operation.type is not OperationType.SUBSCRIPTION:
        return False
    definition = next(
        node
        for node in prepared.document.definitions
        if isinstance(node, OperationDefinitionNode)
        and (operation.name is None or (node.name is not None and node.name.value == operation.name))
    )
    selections = definition.selection_set.selections
    if len(selections) != 1 or not isinstance(selections[0], FieldNode) or selections[0].directives:
        return False
    subscription_type = schema._schema.subscription_type
    field = subscription_type.fields.get(selections[0].name.value) if subscription_type else None
    if not _metadata(field).get("shared_state"):
        return False
    # One execution answers everyone: a selection that reaches a field whose value depends
    # on who asks (viewerHasLiked, …) runs per subscriber instead, so nobody sees another's.
    return not _reaches_dependent_field(schema, prepared.document, dependent_metadata)


def _metadata(field: GraphQLField | None) -> dict[str, Any]:
    strawberry_field = field.extensions.get(DEFINITION_BACKREF) if field is not None else None
    return getattr(strawberry_field, "metadata", None) or {}


def _reaches_dependent_field(schema: MediagraphSchema, document: DocumentNode, metadata: tuple[str, ...]) -> bool:
    """Whether any field the document selects, in fragments too, carries one of the `metadata` marks."""
    type_info = TypeInfo(schema._schema)
    found = False

    class Finder(Visitor):
        def enter_field(self, node: FieldNode, *args: Any) -> Any:
            nonlocal found
            marks = _metadata(type_info.get_field_def())
            if any(marks.get(mark) for mark in metadata):
                found = True
                return BREAK
            return None

    visit(document, TypeInfoVisitor(type_info, Finder()))
    return found


def _next_payload(result: ExecutionResult) -> dict[str, Any]:
    payload: dict[str, Any] = {"data": result.data}
    if result.errors:
        payload["errors"] = [error.formatted for error in result.errors]
    if result.extensions:
        payload["extensions"] = result.extensions
    return payload


def _error_ending(errors: list[GraphQLError]) -> Ending:
    return Ending("error", orjson.dumps([error.formatted for error in errors]).decode())


def subscription_field(schema: MediagraphSchema, query: str, operation_name: str | None) -> str | None:
    """The root field a valid subscription document selects (a label from the schema's own set); else None."""
    try:
        prepared = schema.documents.prepare(query)
        operation = prepared.operation(operation_name)
    except (GraphQLError, CannotGetOperationTypeError):
        return None
    if prepared.errors or operation.type is not OperationType.SUBSCRIPTION:
        return None
    for definition in prepared.document.definitions:
        if isinstance(definition, OperationDefinitionNode) and (
            operation.name is None or (definition.name is not None and definition.name.value == operation.name)
        ):
            first = definition.selection_set.selections[0]
            return first.name.value if isinstance(first, FieldNode) else None
    return None
