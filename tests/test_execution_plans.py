"""Compiled execution plans answer exactly what Strawberry's own execution answers, and leave no garbage."""

from __future__ import annotations

import gc

import pytest
from starlette.requests import Request
from starlette.responses import Response
from strawberry.http import process_result

from mediagraph.context import Context
from mediagraph.dataloaders.base import Loader
from mediagraph.db.media import Media as MediaRow
from mediagraph.serving.executor import PlanExecution
from mediagraph.serving.requests import GraphQLRequest
from tests.support.factories import create_media, create_user

BOOKMARK = "mutation($id: ID!) { bookmark(mediaId: $id) { id } }"

FRAGMENTS = """
query($id: ID!) {
  a: media(id: $id) { ...Fields heading: title }
  b: media(id: $id) { id }
}
fragment Fields on Media { id title tags createdAt sizeBytes contentUrl uploader { username ... on User { nickname } } }
"""
PAGE = """
query($first: Int = 2, $after: String) {
  __typename
  mediaList(first: $first, after: $after) {
    __typename
    edges { cursor node { id title tags uploader { id username } viewerHasBookmarked } }
    pageInfo { hasNextPage endCursor hasPreviousPage startCursor }
  }
}
"""
NULLABLE_ERROR = "query($id: ID!) { media(id: $id) { id } me { id username } }"
BUBBLING = "query($u: String!) { user(username: $u) { username bookmarks { edges { node { id } } } } me { id } }"
VARIABLES = "query($first: Int!, $tags: [String!]) { mediaList(first: $first, tags: $tags) { edges { node { id } } } }"
LITERAL_LIMIT = "{ mediaList(first: 101) { edges { cursor } } }"
ABSTRACT = "query($id: ID!) { node(id: $id) { __typename id ... on Media { title } } }"
DIRECTIVE = "query($full: Boolean!) { me { id username @include(if: $full) } }"
# A non-null field whose resolver fails before its first wait, beside a nullable one that fails too:
# graphql-core starts every sibling before any coroutine runs, so both errors are reported.
SIBLING_ERRORS = '{ mediaList(first: 1, after: "forged") { edges { cursor } } post(id: "") { id } }'
# Mutations run their root fields one after another: the unlike sees the like before it,
# and the state after both is the state before, so both executions start from the same.
SERIAL = """
mutation($id: ID!) {
  liked: likeMedia(mediaId: $id) { id likeCount viewerHasLiked }
  unliked: unlikeMedia(mediaId: $id) { id likeCount viewerHasLiked }
}
"""
# A failing non-null root field after one that succeeded nulls the whole answer.
MUTATION_ERROR = 'mutation($id: ID!) { bookmark(mediaId: $id) { id } likeMedia(mediaId: "!!!") { id } }'
# Variables of leaf types only: coerced by the plan itself unless graphql-core must answer.
LEAVES = """
query($id: ID!, $sort: MediaSort, $first: Int, $match: TagMatch = ANY) {
  media(id: $id) { id title }
  mediaList(sort: $sort, first: $first, tagMatch: $match) { edges { node { id } } }
}
"""
# A list literal argument: Strawberry copies it before the resolver sees it.
LIST_LITERAL = '{ mediaList(first: 3, tags: ["plans", "t1"]) { edges { node { id tags } } } }'
PLAYBACK = "mutation($s: UUID!, $m: ID!) { reportPlayback(sessionId: $s, mediaId: $m) { counted concurrent } }"


def _scope(app, token):
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    return {"type": "http", "method": "POST", "headers": headers, "app": app, "client": ("203.0.113.7", 1)}


async def _planned(app, services, query, variables=None, token=None):
    return await app.graphql.runner.run(
        GraphQLRequest(query, variables, None, None),
        method="POST",
        http=Request(_scope(app, token)),
        services=services,
        sub_response=Response(),
    )


async def _both(app, services, query, variables=None, token=None):
    """(the fast path's response, Strawberry's own execution's response) for one request."""
    planned = await _planned(app, services, query, variables, token)
    runner = app.graphql.runner
    context = Context(services, Request(_scope(app, token)))
    try:
        reference = process_result(await runner.schema.execute(query, variables, context_value=context))
    finally:
        await context.close()
    return planned, reference


def _compiled(app, query) -> bool:
    prepared = app.graphql.runner.schema.documents.cached(query)
    assert prepared is not None
    return any(plan is not None for plan in prepared.plans.values())


@pytest.fixture(scope="module")
async def data(http, gql):
    owner, owner_user = await create_user(gql)
    viewer, viewer_user = await create_user(gql)
    media = [await create_media(http, token=owner, title=f"Plan {n}", tags=["plans", f"t{n}"]) for n in range(3)]
    await gql.ok(BOOKMARK, {"id": media[1]["id"]}, token=viewer)
    return {"owner": owner, "owner_user": owner_user, "viewer": viewer, "viewer_user": viewer_user, "media": media}


@pytest.mark.parametrize(
    ("query", "variables", "as_viewer", "compiled"),
    [
        (FRAGMENTS, lambda d: {"id": d["media"][0]["id"]}, False, True),
        (PAGE, lambda d: {}, True, True),
        (PAGE, lambda d: {"first": 1, "after": "forged"}, True, True),
        (NULLABLE_ERROR, lambda d: {"id": "!!!"}, True, True),
        (NULLABLE_ERROR, lambda d: {"id": d["viewer_user"]["id"]}, False, True),
        (BUBBLING, lambda d: {"u": d["owner_user"]["username"]}, True, True),
        (VARIABLES, lambda d: {"first": 2, "tags": ["plans"]}, False, True),
        (VARIABLES, lambda d: {"tags": ["plans"]}, False, True),
        (VARIABLES, lambda d: {"first": "two"}, False, True),
        (LITERAL_LIMIT, lambda d: {}, False, True),
        (ABSTRACT, lambda d: {"id": d["media"][2]["id"]}, False, False),
        (DIRECTIVE, lambda d: {"full": True}, True, False),
        (SIBLING_ERRORS, lambda d: {}, False, True),
        (SERIAL, lambda d: {"id": d["media"][0]["id"]}, True, True),
        (SERIAL, lambda d: {"id": d["media"][0]["id"]}, False, True),
        (MUTATION_ERROR, lambda d: {"id": d["media"][1]["id"]}, True, True),
        (LEAVES, lambda d: {"id": d["media"][0]["id"], "sort": "NEWEST", "first": 2, "match": "ALL"}, False, True),
        (LEAVES, lambda d: {"id": d["media"][0]["id"], "sort": None}, False, True),
        (LEAVES, lambda d: {"id": d["media"][0]["id"], "sort": "SIDEWAYS"}, False, True),
        (LEAVES, lambda d: {"id": d["media"][0]["id"], "first": "two"}, False, True),
        (LEAVES, lambda d: {"id": None}, False, True),
        (LEAVES, lambda d: {}, False, True),
        (LEAVES, lambda d: {"id": ["a list"], "first": 1.5}, False, True),
        (LIST_LITERAL, lambda d: {}, False, True),
        (PLAYBACK, lambda d: {"s": "not a uuid", "m": d["media"][0]["id"]}, False, True),
        (PLAYBACK, lambda d: {"s": "6f1c1f0e-6d3a-4c1e-9a53-2f7d7b0f6c11", "m": "!!!"}, False, True),
    ],
)
async def test_plan_answers_exactly_as_strawberry(app, services, data, query, variables, as_viewer, compiled):
    token = data["viewer"] if as_viewer else None
    planned, reference = await _both(app, services, query, variables(data), token)
    assert planned == reference
    assert _compiled(app, query) is compiled


async def test_plans_can_be_turned_off(app, services, data, settings):
    from mediagraph.serving.execution import OperationRunner
    from mediagraph.serving.persisted import PersistedQueries

    runner = OperationRunner(app.graphql.runner.schema, PersistedQueries(local_size=1, max_stored=1), plans=False)
    # A text no other test sends: the schema's document cache (and its plans) is shared by every runner.
    query = "query($id: ID!) { media(id: $id) { unplanned: title } }"
    body = await runner.run(
        GraphQLRequest(query, {"id": data["media"][0]["id"]}, None, None),
        method="POST",
        http=Request(_scope(app, None)),
        services=services,
        sub_response=Response(),
    )
    assert body == {"data": {"media": {"unplanned": "Plan 0"}}}
    assert not _compiled(app, query)


async def test_requests_leave_nothing_for_the_cycle_collector(app, services, data):
    # Everything a request creates is freed by reference counting when it ends; a
    # reference cycle would leave whole requests to the collector (see serving/memory.py).
    requests = [
        (FRAGMENTS, {"id": data["media"][0]["id"]}, None),
        (PAGE, {}, data["viewer"]),
        (NULLABLE_ERROR, {"id": "!!!"}, None),
        (BUBBLING, {"u": data["owner_user"]["username"]}, data["viewer"]),
    ]
    for query, variables, token in requests:
        await _planned(app, services, query, variables, token)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for query, variables, token in requests:
            await _planned(app, services, query, variables, token)
        gc.collect()
        leaked = [obj for obj in gc.garbage if isinstance(obj, Context | PlanExecution | Loader | MediaRow)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert leaked == []


def _plan(app, query):
    runner = app.graphql.runner
    prepared = runner.schema.documents.prepare(query)
    plan = prepared.plan(runner.graphql_schema, prepared.operation(None))
    assert plan is not None
    return plan


@pytest.mark.parametrize(
    ("inputs", "coerced_by_plan"),
    [
        ({"id": "TWVkaWE6MQ==", "sort": "VIEWS", "first": 3, "match": "ALL"}, True),
        ({"id": 7, "sort": None, "match": "ANY"}, True),  # an Int is a valid ID; a nullable variable's null
        ({"id": "TWVkaWE6MQ==", "first": 1.0}, False),  # $match's default: graphql-core fills it in
        ({"id": "x", "sort": "SIDEWAYS", "match": "ALL"}, False),
        ({"id": "x", "first": "3", "match": "ALL"}, False),
        ({"id": None, "match": "ALL"}, False),
        ({"match": "ALL"}, False),
        ({"id": {"nested": [1]}, "match": "ALL"}, False),
    ],
)
async def test_plan_variables_coerce_as_graphql_core_does(app, inputs, coerced_by_plan):
    from graphql.execution.values import get_variable_values

    plan = _plan(app, LEAVES)
    assert plan.variables is not None
    reference = get_variable_values(app.graphql.runner.graphql_schema, plan.operation.variable_definitions, inputs)
    mine = plan.variables.coerce(inputs)
    # None leaves the request to graphql-core (its errors, its defaults); anything else is its answer.
    assert (mine is not None) is coerced_by_plan
    if mine is not None:
        assert mine.coerced == reference.coerced

        def sources(values):
            return {name: (s.signature.name, str(s.signature.type), s.value) for name, s in values.sources.items()}

        assert sources(mine) == sources(reference)


def test_only_leaf_variables_are_coerced_by_the_plan(app):
    assert _plan(app, VARIABLES).variables is None  # a list variable: graphql-core coerces it
    assert _plan(app, PLAYBACK).variables is not None


def test_resolvers_are_called_directly_only_where_strawberry_would_just_rename_arguments(app):
    def root_field(query, key):
        return next(field for field in _plan(app, query).root.fields if field.key == key)

    media = root_field(LEAVES, "media").direct
    assert media is not None
    assert media.arguments == {"id": ("id", False)}
    assert media.pass_source
    assert root_field(LIST_LITERAL, "mediaList").direct.arguments["tags"] == ("tags", True)
    playback = root_field(PLAYBACK, "reportPlayback").direct
    assert playback is not None
    assert playback.arguments == {"sessionId": ("session_id", False), "mediaId": ("media_id", False), "at": ("at", False)}
    # Input objects keep Strawberry's wrapper, which builds them.
    scores = 'mutation { submitScores(leaderboard: "b", scores: [{userId: "u", score: 1}]) { changed } }'
    assert root_field(scores, "submitScores").direct is None
    # Plain attribute fields never had a wrapper to skip.
    assert all(field.direct is None for field in root_field(LEAVES, "media").completion.object.fields)


# Literals, defaults and variables in one field's arguments (each of mediaList's has a default).
ARGUMENTS = (
    "query($first: Int, $sort: MediaSort!, $after: String) "
    '{ mediaList(first: $first, tags: ["a"], sort: $sort, after: $after) { edges { cursor } } }'
)


@pytest.mark.parametrize(
    ("inputs", "taken_by_plan"),
    [
        ({"first": 2, "sort": "VIEWS", "after": "c"}, True),
        ({"first": None, "sort": "LIKES", "after": None}, True),
        ({"sort": "VIEWS"}, False),  # $first and $after not given: graphql-core decides (no defaults here)
        ({"first": 1, "sort": "VIEWS"}, False),
    ],
)
def test_plan_arguments_are_what_graphql_core_gives(app, inputs, taken_by_plan):
    from graphql.execution.values import get_argument_values, get_variable_values

    plan = _plan(app, ARGUMENTS)
    field = plan.root.fields[0]
    variables = get_variable_values(app.graphql.runner.graphql_schema, plan.operation.variable_definitions, inputs)
    reference = get_argument_values(field.definition, field.node, variables)
    mine = field.arguments.values(variables)
    assert (mine is not None) is taken_by_plan
    if mine is not None:
        assert mine == reference
    # The literal and the default of an argument not given are coerced once, with the plan.
    assert set(field.arguments.fixed) == {"tags", "tagMatch", "last", "before"}
    assert [variable for _, variable, _ in field.arguments.from_variables] == ["sort", "first", "after"]
