"""OpenTelemetry tracing: off unless the OTEL_* variables ask for it, and its packages optional.

Tracing starts when the standard variables ask for an exporter (`OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_TRACES_EXPORTER=otlp|console`) and
`OTEL_SDK_DISABLED` is not `true`; the SDK reads the rest (service name, sampler, batch
sizes, headers) from the same variables. The packages are the `otel` extra
(`pip install 'mediagraph[otel]'`, `uv sync --extra otel`): asked for without them,
tracing stays off and startup says why.

While on: one span per GraphQL operation (`query GetMedia`), a child of the caller's
`traceparent`, with the operation's type, name, request id and query cost; asyncpg and
Redis calls made for it become its children through the libraries' instrumentations.
While off, nothing of OpenTelemetry is imported and every hook here is a check of one
module global, so the request path costs what it costs without the packages.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

from mediagraph.observability import request_ids

log = logging.getLogger(__name__)

TRACER_NAME = "mediagraph"
# Errors that are the server's failure, not the caller's: they mark the span as failed.
FAILURE_CODES = frozenset({"INTERNAL_SERVER_ERROR", "SERVICE_UNAVAILABLE"})
EXTRA_HINT = "install the `otel` extra: pip install 'mediagraph[otel]' (or uv sync --extra otel)"

# The tracer while tracing is on; None while it is off.
_tracer: Any = None
_configured = False


def enabled() -> bool:
    return _tracer is not None


def requested(environ: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether the OTEL_* variables ask for traces to be exported."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER")
    if exporter is not None:
        return exporter.strip().lower() not in ("", "none")
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def configure_tracing(*, exporter: Any = None) -> bool:
    """Start tracing for this process if asked (or with `exporter`, for tests); True when on."""
    global _tracer, _configured
    if _configured:
        return _tracer is not None
    _configured = True
    if exporter is None and not requested():
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
        from opentelemetry.instrumentation.redis import RedisInstrumentor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as missing:
        log.warning("tracing is off: OTEL_* asks for traces but %s is not installed; %s", missing.name, EXTRA_HINT)
        return False
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the provider, OTEL_TRACES_SAMPLER,
    # and it exports what is still buffered when the process exits.
    provider = TracerProvider(
        resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "mediagraph")})
    )
    provider.add_span_processor(BatchSpanProcessor(exporter or _exporter()))
    trace.set_tracer_provider(provider)
    AsyncPGInstrumentor().instrument(tracer_provider=provider)  # type: ignore[no-untyped-call]
    RedisInstrumentor().instrument(tracer_provider=provider)
    _tracer = provider.get_tracer(TRACER_NAME)
    log.info("tracing on: spans export through %s", type(exporter).__name__ if exporter else "OTLP")
    return True


def _exporter() -> Any:
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    # OTLP over HTTP (protobuf); endpoint, headers, timeout and compression from OTEL_EXPORTER_OTLP_*.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


class OperationSpan:
    """The span of one operation, named and labelled once the operation is known."""

    def __init__(self, span: Any) -> None:
        self.span = span

    def finished(
        self, operation_type: str | None, name: str | None, error_codes: Sequence[object], *, cost: int | None = None
    ) -> None:
        if operation_type is not None:
            self.span.update_name(f"{operation_type} {name}" if name else operation_type)
            self.span.set_attribute("graphql.operation.type", operation_type)
        if name:
            self.span.set_attribute("graphql.operation.name", name)
        if cost is not None:
            # The estimate the cost limit checked (serving/cost.py), so a slow trace shows what was asked.
            self.span.set_attribute("graphql.operation.cost", cost)
        if error_codes:
            from opentelemetry.trace import Status, StatusCode

            codes = [str(code) for code in error_codes]
            self.span.set_attribute("graphql.error.codes", codes)
            if FAILURE_CODES.intersection(codes):
                self.span.set_status(Status(StatusCode.ERROR))


@contextlib.contextmanager
def operation_span(headers: list[tuple[bytes, bytes]] | None) -> Iterator[OperationSpan]:
    """A server span for one operation, continuing the trace in the request's `traceparent`."""
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind

    carrier = {name.decode("latin-1"): value.decode("latin-1") for name, value in headers or ()}
    with _tracer.start_as_current_span("graphql", context=propagate.extract(carrier), kind=SpanKind.SERVER) as span:
        request_id = request_ids.CURRENT.get()
        if request_id is not None:
            span.set_attribute("mediagraph.request_id", request_id)
        yield OperationSpan(span)


def current_ids() -> tuple[str, str] | None:
    """The current trace and span ids in hex, for log lines; None while tracing is off."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"
