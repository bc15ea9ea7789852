"""Differential testing of execution plans: hypothesis-graphql writes valid queries over our
schema, and each runs on two apps over the same data, one with MEDIAGRAPH_EXECUTION_PLANS on
and one with it off (graphql-core's own execution). The answers must be identical, data and
errors alike: our executor earns its place only by never answering differently.

Arguments are drawn mostly from the seeded data by their name (a media id for `mediaId`,
a username for `username`, a real cursor for `after`, small page sizes), so queries reach
real rows rather than answering NOT_FOUND; now and then the generated value is kept, which
exercises the error paths. Generation is seeded (MEDIAGRAPH_DIFFERENTIAL_SEED), and
MEDIAGRAPH_DIFFERENTIAL_EXAMPLES sets how many queries run (README: the long run).

Some answers change between two runs of the same query whatever the executor (a VIEWS page
opens a new pagination session, so its cursors differ; live counts follow the clock). The
planned answer is taken between two unplanned ones and must equal one of them, or differ
from them only where they differ from each other.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from graphql import (
    ArgumentNode,
    DocumentNode,
    FieldNode,
    GraphQLSchema,
    ValueNode,
    get_named_type,
    is_abstract_type,
    print_ast,
    visit,
)
from graphql.language import Visitor
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from hypothesis_graphql import nodes, queries
from starlette.applications import Starlette

from mediagraph.app import create_app
from mediagraph.settings import Settings
from mediagraph.workers import hot as hot_worker
from mediagraph.workers import views as views_worker
from tests.support.factories import (
    add_comment,
    create_media,
    create_post,
    create_user,
    define_leaderboard,
    follow,
    record_views,
    service_token,
    submit_score,
)
from tests.support.graphql import GraphQLClient
from tests.support.playback import new_session, report

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("MEDIAGRAPH_DIFFERENTIAL_EXAMPLES", "300"))
SEED = int(os.environ.get("MEDIAGRAPH_DIFFERENTIAL_SEED", "15"))

BOOKMARK = "mutation($id: ID!) { bookmark(mediaId: $id) { id } }"
LIKE = "mutation($id: ID!) { likeMedia(mediaId: $id) { id } }"
CURSORS = """
query($media: ID!, $user: String!) {
  mediaList(first: 2) { pageInfo { endCursor } }
  byViews: mediaList(first: 2, sort: VIEWS) { pageInfo { endCursor } }
  media(id: $media) { comments(first: 1) { pageInfo { endCursor } } }
  leaderboards(first: 1) { pageInfo { endCursor } }
  newsfeed(first: 2) { pageInfo { endCursor } }
  user(username: $user) { followers(first: 1) { pageInfo { endCursor } } posts(first: 2) { pageInfo { endCursor } } }
}
"""


@dataclass
class Seeded:
    tokens: list[str]
    users: list[str]
    usernames: list[str]
    media: list[str]
    posts: list[str]
    comments: list[str]
    boards: list[str]
    tags: list[str]
    cursors: dict[str, list[str]]
    dates: list[str]
    moments: list[str]

    @property
    def ids(self) -> list[str]:
        return self.users + self.media + self.posts + self.comments


@dataclass
class Tally:
    cases: int = 0
    compiled: int = 0
    reached_rows: int = 0
    unsteady: int = 0


@asynccontextmanager
async def _serving(settings: Settings, *, plans: bool) -> AsyncIterator[httpx.AsyncClient]:
    """A fresh app over the run's databases and Redis, as `MEDIAGRAPH_EXECUTION_PLANS=<plans>` serves."""
    application = create_app(settings.model_copy(update={"execution_plans": plans}))
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application, client=("203.0.113.7", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://mediagraph.test") as client:
            client.app = application  # type: ignore[attr-defined]
            yield client


@pytest.fixture(scope="module")
async def planned_http(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    # Both sides are new apps, so neither carries state earlier tests left in the run's app.
    async with _serving(settings, plans=True) as client:
        yield client


@pytest.fixture(scope="module")
async def unplanned_http(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with _serving(settings, plans=False) as client:
        yield client


@pytest.fixture(scope="module")
async def seeded(http, gql: GraphQLClient, services, settings: Settings) -> Seeded:
    """Users who upload, follow, post, comment, like, bookmark, view, play and score."""
    users = [await create_user(gql, nickname=f"Differential {n}") for n in range(4)]
    tokens = [token for token, _ in users]
    user_ids = [user["id"] for _, user in users]
    tags = ["cats", "dogs", "music", "travel"]
    media = [
        (await create_media(http, token=tokens[n % 2], title=f"Clip {n}", tags=[tags[n % 4], tags[(n + 1) % 4]]))["id"]
        for n in range(8)
    ]
    for reader in tokens[1:]:
        await follow(gql, token=reader, user_id=user_ids[0])
    await follow(gql, token=tokens[0], user_id=user_ids[1])
    posts = [
        await create_post(gql, token=tokens[n % 2], text=f"Post {n}", media_id=media[n] if n % 3 == 0 else None)
        for n in range(6)
    ]
    comments: list[str] = []
    for n, media_id in enumerate(media[:4]):
        root = await add_comment(gql, token=tokens[n % 4], media_id=media_id, content=f"Root {n}")
        reply = await add_comment(gql, token=tokens[(n + 1) % 4], media_id=media_id, content="Re", parent_id=root["id"])
        comments += [root["id"], reply["id"]]
    for n, media_id in enumerate(media):
        for token in tokens[: n % 4]:
            await gql.ok(LIKE, {"id": media_id}, token=token)
        await gql.ok(BOOKMARK, {"id": media_id}, token=tokens[n % 3])
        await record_views(http, media_id=media_id, count=n + 1)
    await views_worker.flush(services)
    await views_worker.sync(services)
    service = service_token(settings)
    boards = [(await define_leaderboard(gql, token=service, period=period))["name"] for period in ("ALL_TIME", "DAILY")]
    for board in boards:
        for n, user_id in enumerate(user_ids):
            await submit_score(gql, token=service, board=board, user_id=user_id, score=10.0 * n + 1)
    for media_id in media[:3]:
        await report(gql, new_session(), media_id)
    await hot_worker.ensure_group(services)
    while await hot_worker.consume(services, consumer="differential", block_ms=None):
        pass
    pages = await gql.ok(CURSORS, {"media": media[0], "user": users[0][1]["username"]}, token=tokens[1])
    connections = {
        "mediaList": [pages["mediaList"], pages["byViews"]],
        "comments": [pages["media"]["comments"]],
        "leaderboards": [pages["leaderboards"]],
        "newsfeed": [pages["newsfeed"]],
        "followers": [pages["user"]["followers"]],
        "posts": [pages["user"]["posts"]],
    }
    cursors = {
        field: [page["pageInfo"]["endCursor"] for page in pages_of_field if page["pageInfo"]["endCursor"]]
        for field, pages_of_field in connections.items()
    }
    today = datetime.now(UTC).date()
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    return Seeded(
        tokens=tokens,
        users=user_ids,
        usernames=[user["username"] for _, user in users],
        media=media,
        posts=posts,
        comments=comments,
        boards=boards,
        tags=tags,
        cursors=cursors,
        dates=[(today - timedelta(days=n)).isoformat() for n in range(3)],
        moments=[(now - timedelta(hours=n)).isoformat() for n in (0, 1, 30)],
    )


def _mostly(usual: st.SearchStrategy[Any], other: st.SearchStrategy[Any], *, odds: int) -> st.SearchStrategy[Any]:
    """`usual` `odds` times out of `odds + 1` (st.one_of would merge repeated strategies into one)."""
    return st.integers(min_value=0, max_value=odds).flatmap(lambda n: other if n == odds else usual)


def _strings(values: list[str]) -> st.SearchStrategy[ValueNode]:
    return st.sampled_from(values).map(nodes.String)


def _ints(low: int, high: int) -> st.SearchStrategy[ValueNode]:
    return st.integers(min_value=low, max_value=high).map(nodes.Int)


def _argument_values(data: Seeded) -> dict[tuple[str, str], st.SearchStrategy[ValueNode]]:
    """Values for (field, argument); a field of "*" stands for any field with that argument."""
    ids = _strings(data.ids)
    cursors = {
        (field, "after"): st.one_of(st.just(nodes.Null), _strings(values))
        for field, values in data.cursors.items()
        if values
    }
    return {
        **cursors,
        ("node", "id"): ids,
        ("nodes", "ids"): st.lists(ids, max_size=4).map(nodes.List),
        ("media", "id"): _strings(data.media),
        ("post", "id"): _strings(data.posts),
        ("*", "mediaId"): _strings(data.media),
        ("*", "userId"): _strings(data.users),
        ("*", "username"): _strings(data.usernames),
        ("*", "name"): _strings(data.boards),
        ("*", "period"): st.one_of(st.just(nodes.Null), _strings(data.dates)),
        ("*", "tags"): st.lists(_strings(data.tags), max_size=2).map(nodes.List),
        ("*", "after"): st.just(nodes.Null),
        ("*", "first"): st.one_of(st.just(nodes.Null), _ints(1, 5)),
        ("*", "size"): _ints(1, 5),
        ("*", "page"): _ints(1, 3),
        ("*", "radius"): _ints(0, 3),
        ("*", "days"): _ints(1, 7),
        ("*", "date"): st.one_of(st.just(nodes.Null), _strings(data.dates)),
        ("*", "from"): st.one_of(st.just(nodes.Null), _strings(data.moments[1:])),
        ("*", "to"): st.one_of(st.just(nodes.Null), _strings(data.moments[:1])),
    }


class _Arguments(Visitor):
    """Collects every argument with its field's name, in document order; or, given values, replaces them."""

    def __init__(self, values: list[ValueNode] | None = None) -> None:
        super().__init__()
        self.slots: list[tuple[str, str, ValueNode]] = []
        self.values = values
        self.field_names: list[str] = []

    def enter_field(self, node: FieldNode, *_: Any) -> None:
        self.field_names.append(node.name.value)

    def leave_field(self, node: FieldNode, *_: Any) -> None:
        self.field_names.pop()

    def enter_argument(self, node: ArgumentNode, *_: Any) -> Any:
        index = len(self.slots)
        self.slots.append((self.field_names[-1], node.name.value, node.value))
        if self.values is None:
            return None
        return ArgumentNode(name=node.name, value=self.values[index])


def _with_seeded_arguments(document: DocumentNode, data: Seeded) -> st.SearchStrategy[str]:
    """The generated query with its arguments drawn from the seeded data, mostly."""
    collected = _Arguments()
    visit(document, collected)
    choices = _argument_values(data)
    strategies = []
    for field_name, argument, original in collected.slots:
        seeded_value = choices.get((field_name, argument), choices.get(("*", argument)))
        generated = st.just(original)
        # One argument in six keeps what hypothesis-graphql generated: the error paths count too.
        strategies.append(generated if seeded_value is None else _mostly(seeded_value, generated, odds=5))

    def rewrite(values: tuple[ValueNode, ...]) -> str:
        return print_ast(visit(document, _Arguments(list(values))))

    return st.tuples(*strategies).map(rewrite)


def _queries(schema: GraphQLSchema, data: Seeded) -> st.SearchStrategy[str]:
    """Mostly queries plans can run: `node` and `nodes` return an interface, which plans leave
    to graphql-core, and a document that selects one runs on graphql-core as a whole."""
    assert schema.query_type is not None
    object_roots = [
        name for name, root in schema.query_type.fields.items() if not is_abstract_type(get_named_type(root.type))
    ]
    documents: Callable[..., st.SearchStrategy[DocumentNode]] = queries  # type: ignore[assignment]
    planned = documents(schema, fields=object_roots, print_ast=lambda document: document, allow_x00=False)
    anything = documents(schema, print_ast=lambda document: document, allow_x00=False)
    return _mostly(planned, anything, odds=3).flatmap(lambda document: _with_seeded_arguments(document, data))


def _unsteady_paths(first: Any, second: Any, path: tuple[Any, ...] = ()) -> set[tuple[Any, ...]]:
    """Where two answers to the same query differ (the whole subtree when their shapes do)."""
    if isinstance(first, dict) and isinstance(second, dict) and first.keys() == second.keys():
        return {p for key in first for p in _unsteady_paths(first[key], second[key], (*path, key))}
    if isinstance(first, list | tuple) and isinstance(second, list | tuple) and len(first) == len(second):
        return {
            p for n, (a, b) in enumerate(zip(first, second, strict=True)) for p in _unsteady_paths(a, b, (*path, n))
        }
    return set() if first == second else {path}


def _masked(answer: Any, unsteady: set[tuple[Any, ...]], path: tuple[Any, ...] = ()) -> Any:
    if path in unsteady:
        return "<differs between runs>"
    if isinstance(answer, dict):
        return {key: _masked(value, unsteady, (*path, key)) for key, value in answer.items()}
    if isinstance(answer, list | tuple):
        return [_masked(value, unsteady, (*path, n)) for n, value in enumerate(answer)]
    return answer


def _reaches_rows(data: Any) -> bool:
    """Whether some root field answered with an object or list holding a value (not all null)."""

    def holds_value(value: Any) -> bool:
        if isinstance(value, dict):
            return any(holds_value(inner) for inner in value.values())
        if isinstance(value, list):
            return any(holds_value(inner) for inner in value)
        return value is not None

    return isinstance(data, dict) and any(
        isinstance(value, dict | list) and holds_value(value) for value in data.values()
    )


def _sibling_finished_first(planned: Any, core: Any) -> bool:
    """The same data, and the planned answer's errors are graphql-core's and more.

    When a non-null field fails, its parent becomes null and graphql-core cancels the
    siblings still running; a sibling that finished before that reports its error too.
    Plans start each resolver at once, as an eager task would, so a sibling's I/O begins
    earlier and may finish first: graphql-core's own rule, met at another moment. The
    data must still be identical, and no error of graphql-core's may be missing.
    """
    if planned[0] != 200 or core[0] != 200 or not isinstance(planned[1], dict) or not isinstance(core[1], dict):
        return False
    if planned[1].get("data") != core[1].get("data"):
        return False
    planned_errors = planned[1].get("errors") or []
    core_errors = core[1].get("errors") or []
    return bool(core_errors) and all(error in planned_errors for error in core_errors)


def _compiled(app: Starlette, query: str) -> bool:
    prepared = app.graphql.runner.schema.documents.cached(query)  # type: ignore[attr-defined]
    return prepared is not None and any(plan is not None for plan in prepared.plans.values())


async def _answer(client: httpx.AsyncClient, query: str, token: str | None) -> tuple[int, Any]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    response = await client.post("/graphql", json={"query": query}, headers=headers)
    if response.status_code != 200:
        return response.status_code, response.text
    body = response.json()
    for error in body.get("errors") or ():
        # Names the request, not the answer: it differs on every request, whoever executes it.
        (error.get("extensions") or {}).pop("requestId", None)
    return response.status_code, body


async def test_plans_answer_every_generated_query_as_graphql_core_does(
    planned_http, unplanned_http, seeded, record_property
):
    app = planned_http.app
    loop = asyncio.get_running_loop()
    tally = Tally()

    async def compare(query: str, token: str | None) -> None:
        before = await _answer(unplanned_http, query, token)
        planned = await _answer(planned_http, query, token)
        after = await _answer(unplanned_http, query, token)
        tally.cases += 1
        tally.compiled += _compiled(app, query)
        differs = f"plans answered differently:\n{query}\nplanned: {planned}\ngraphql-core: {before} / {after}"
        if planned not in (before, after) and not _sibling_finished_first(planned, before):
            unsteady = _unsteady_paths(before, after)
            assert unsteady, differs
            assert _masked(planned, unsteady) == _masked(before, unsteady), differs
        tally.unsteady += before != after
        body = planned[1]
        tally.reached_rows += isinstance(body, dict) and _reaches_rows(body.get("data"))

    @seed(SEED)
    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(query=_queries(app.graphql.runner.graphql_schema, seeded), token=st.sampled_from([None, *seeded.tokens[:2]]))
    def check(query: str, token: str | None) -> None:
        asyncio.run_coroutine_threadsafe(compare(query, token), loop).result()

    await asyncio.to_thread(check)
    record_property("suite: differential cases", tally.cases)
    record_property("suite: differential cases run from a plan", tally.compiled)
    record_property("suite: differential cases that read seeded rows", tally.reached_rows)
    record_property("suite: differential cases whose answer moves between runs", tally.unsteady)
    # The comparison means something only if plans ran and real rows came back.
    assert tally.compiled >= tally.cases // 2
    assert tally.reached_rows >= tally.cases // 2
