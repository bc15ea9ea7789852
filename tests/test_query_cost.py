"""The query cost limit: nodes a query may return, estimated from first/last before it runs."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from graphql import GraphQLSyntaxError, OperationDefinitionNode, parse, validate

from mediagraph.serving.cost import cost_formula
from mediagraph.serving.schema import build_schema
from mediagraph.settings import Settings
from tests.support.graphql import WebSocketClient, error_extensions

ROOT = Path(__file__).parent.parent
SCHEMA = build_schema()._schema

ME = "{ me { id } }"
NESTED = """
query Nested($outer: Int, $inner: Int = 20) {
  mediaList(first: $outer) { edges { node { id comments(first: $inner) { edges { node { id } } } } } }
}
"""
THREE_DEEP = """
query ThreeDeep {
  mediaList(first: 100) { edges { node { uploader { media(first: 100) { edges { node {
    uploader { ...Library }
  } } } } } } }
}
fragment Library on User { media(first: 100) { edges { node { id } } } }
"""
DEFAULTS = "{ newsfeed { edges { node { id } } } mediaList { edges { node { id } } } }"
TOP_BY_DEFAULT = 'subscription { leaderboardTop(name: "weekly") { entries { rank } } }'
ON_A_TYPE = """
query($id: ID!) { node(id: $id) { ... on User { followers(first: 30) { edges { node { id } } } } } }
"""

PLAYS = """
query($user: ID!, $first: Int, $last: Int) {
  channelStats(userId: $user) {
    plays(first: $first, last: $last) { edges { node { id } } }
    recent: plays { edges { node { id } } }
  }
}
"""


def cost(document: str, variables: dict | None = None, operation: str | None = None) -> int:
    return cost_formula(SCHEMA, parse(document), operation).evaluate(variables, cap=100)


def test_cost_is_one_plus_the_nodes_each_connection_may_return():
    assert cost(ME) == 1
    assert cost(NESTED, {"outer": 50}) == 1 + 50 + 50 * 20
    assert cost(NESTED, {"outer": 50, "inner": 3}) == 1 + 50 + 50 * 3
    assert cost(THREE_DEEP) == 1 + 100 + 100**2 + 100**3
    assert cost(ON_A_TYPE, {"id": "x"}) == 1 + 30
    assert cost(PLAYS, {"first": 30}) == 1 + 30 + 20  # and the default page of `recent`
    assert cost(PLAYS, {"last": 100}) == 1 + 100 + 20


def test_omitted_sizes_count_as_the_default_page_and_sizes_stop_at_the_cap():
    assert cost(DEFAULTS) == 1 + 20 + 20  # the resolvers' default page
    assert cost(TOP_BY_DEFAULT) == 1 + 10  # the argument's own default
    assert cost(NESTED, {}) == 1 + 20 + 20 * 20
    assert cost(NESTED, {"outer": None}) == 1 + 20 + 20 * 20
    assert cost(NESTED, {"outer": 10**9, "inner": 10**9}) == 1 + 100 + 100 * 100
    assert cost(NESTED, {"outer": "many"}) == 1 + 20 + 20 * 20


def test_introspection_costs_one():
    from graphql import get_introspection_query

    assert cost(get_introspection_query()) == 1


async def test_a_query_over_the_limit_is_refused_before_it_runs(gql, settings, count_queries):
    count_queries.clear()
    result = await gql(THREE_DEEP)
    assert result["data"] is None
    assert error_extensions(result) == {
        "code": "QUERY_TOO_COMPLEX",
        "cost": 1 + 100 + 100**2 + 100**3,
        "limit": settings.max_query_cost,
    }
    assert count_queries == []


async def test_the_cost_depends_on_the_variables_of_each_request(gql):
    nested_deep = THREE_DEEP.replace("first: 100", "first: $n").replace("query ThreeDeep", "query ThreeDeep($n: Int)")
    assert (await gql(nested_deep, {"n": 30}))["data"] is not None  # 1 + 30 + 900 + 27,000
    refused = await gql(nested_deep, {"n": 40})  # 1 + 40 + 1,600 + 64,000
    assert refused["errors"][0]["extensions"]["code"] == "QUERY_TOO_COMPLEX"


async def test_the_cost_is_reported_when_asked(http, settings):
    body = {"query": NESTED, "variables": {"outer": 5}, "extensions": {"cost": True}}
    answer = (await http.post("/graphql", json=body)).json()
    assert answer["extensions"] == {"cost": {"requested": 1 + 5 + 5 * 20, "limit": settings.max_query_cost}}
    assert "extensions" not in (await http.post("/graphql", json={"query": NESTED})).json()


async def test_websocket_operations_are_held_to_the_same_limit(live_servers):
    base = live_servers.start("--no-workers")
    client = await WebSocketClient.connect(base.replace("http://", "ws://") + "/graphql")
    try:
        assert (await client.receive())["type"] == "connection_ack"
        operation = await client.subscribe(THREE_DEEP)
        message = await client.receive()
        assert message["id"] == operation
        assert message["type"] == "error"
        assert message["payload"][0]["extensions"]["code"] == "QUERY_TOO_COMPLEX"
        fine = await client.subscribe(ME)
        assert (await client.receive()) == {"id": fine, "type": "next", "payload": {"data": {"me": None}}}
    finally:
        await client.close()


def _documents() -> list[tuple[str, str]]:
    """Every GraphQL document the project sends: tests, benchmarks, demo traffic, the browser pages
    (but this module's, made to be refused)."""
    found: list[tuple[str, str]] = []
    for folder in ("tests", "benchmarks", "mediagraph"):
        for path in (ROOT / folder).rglob("*.py"):
            if path == Path(__file__):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and "{" in node.value:
                    found.append((str(path.relative_to(ROOT)), node.value))
    for path in (ROOT / "mediagraph" / "static").rglob("*"):
        if path.suffix in {".html", ".js"} and "vendor" not in path.parts:
            found += [(str(path.relative_to(ROOT)), text) for text in re.findall(r"`([^`]*)`", path.read_text())]
    return found


def test_every_document_the_project_sends_stays_under_the_default_limit():
    limit, cap = Settings.model_fields["max_query_cost"].default, Settings.model_fields["max_page_size"].default
    checked = 0
    for where, text in _documents():
        try:
            document = parse(text)
        except GraphQLSyntaxError:
            continue
        if validate(SCHEMA, document):
            continue
        for operation in document.definitions:
            if isinstance(operation, OperationDefinitionNode):
                formula = cost_formula(SCHEMA, document, operation.name.value if operation.name else None)
                # Every variable page size at the cap: the most the document can ever cost.
                worst = formula.evaluate(dict.fromkeys(formula.variables, cap), cap=cap)
                assert worst <= limit, f"{where}: {text[:200]}"
                checked += 1
    assert checked > 150


@pytest.mark.parametrize("value", [0, -1])
def test_the_limit_is_positive(value):
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        Settings(max_query_cost=value)
