"""The clients single-page apps use, run for real (tests/clients, versions pinned in its
package.json) with the setups docs/clients.md gives: Apollo Client and urql graphcache take
pushes into their caches with no updater, Relay's compiler accepts the documents an app holds
and its store the pushes, the legacy subscriptions-transport-ws client is served,
graphql-codegen maps every scalar, and graphql-eslint's Relay rules pass over the schema.

npm installs the pinned packages once into a cache outside the repository
(MEDIAGRAPH_CLIENTS_CACHE, default ~/.cache/mediagraph/clients). Without a registry these
tests are skipped, unless CI is set: then they fail."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import uvicorn
from graphql import get_named_type, is_object_type, is_scalar_type

from mediagraph.serving.schema import build_schema
from mediagraph.workers import views as view_worker
from tests.support.clients import NodeScript, run_tool, workspace
from tests.support.factories import (
    create_media,
    create_user,
    define_leaderboard,
    record_views,
    service_token,
    submit_score,
    unique_name,
)
from tests.support.servers import free_port


@pytest.fixture(scope="module")
def schema_sdl() -> str:
    return build_schema().as_str()


@pytest.fixture
def app_folder(tmp_path, installed, schema_sdl) -> Path:
    return workspace(tmp_path / "app", installed, schema_sdl)


@pytest.fixture(scope="module")
async def api(app) -> AsyncIterator[dict[str, str]]:
    """The in-process app under a real uvicorn: the tests settle view counts between pages."""
    port = free_port()
    runner = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning"))
    task = asyncio.create_task(runner.serve())
    while not runner.started:
        assert not task.done(), "uvicorn exited"
        await asyncio.sleep(0.05)
    yield {"MEDIAGRAPH_HTTP_URL": f"http://127.0.0.1:{port}/graphql", "MEDIAGRAPH_WS_URL": f"ws://127.0.0.1:{port}/graphql"}
    runner.should_exit = True
    await task


async def _media_and_board(gql, http, settings) -> dict[str, str]:
    """A media with no views yet, and a board whose top 3 is B (20), A (10), C (5)."""
    token, _ = await create_user(gql)
    media = await create_media(http, token=token, title="Watched")
    service = service_token(settings)
    board = (await define_leaderboard(gql, token=service))["name"]
    players = [user["id"] for _, user in [await create_user(gql) for _ in range(4)]]
    for player, score in zip(players, (10, 20, 5), strict=False):
        await submit_score(gql, token=service, board=board, user_id=player, score=score)
    return {
        "MEDIA_ID": media["id"],
        "BOARD": board,
        "SERVICE_TOKEN": service,
        # The scripts raise A to 30 and bring D in at 25.
        "PLAYERS": json.dumps([players[0], players[2], players[3]]),
        "USER_TOKEN": token,
    }


TOP_IDS = "query($b: String!) { leaderboard(name: $b) { top(first: 3) { edges { node { id score } } } } }"


@pytest.mark.parametrize("script", ["apollo.mjs", "urql.mjs"])
async def test_a_view_count_push_and_a_leaderboard_push_update_the_cache_with_no_updater(
    script, app_folder, api, gql, http, settings
):
    scenario = await _media_and_board(gql, http, settings)
    client = await NodeScript.start(app_folder, script, **api, **scenario)
    try:
        said = await client.said()
        await client.finished()
    finally:
        client.kill()
    before, after = said["before"], said["after"]
    assert before["media"]["viewCount"] == 0
    assert after["media"] == {**before["media"], "viewCount": 1}
    # The cached top(first: 3) is the board as it is now, every entry under the id reads give it.
    now = [edge["node"] for edge in (await gql.ok(TOP_IDS, {"b": scenario["BOARD"]}))["leaderboard"]["top"]["edges"]]
    assert [(edge["node"]["id"], edge["node"]["score"]) for edge in after["leaderboard"]["top"]["edges"]] == [
        (entry["id"], entry["score"]) for entry in now
    ]
    assert [entry["score"] for entry in now] == [30.0, 25.0, 20.0]
    assert after["leaderboard"]["id"] == before["leaderboard"]["id"]


async def test_relay_store_takes_a_push_with_no_updater(app_folder, api, gql, http, settings):
    compiled = run_tool(app_folder / "relay", "relay-compiler")
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    scenario = await _media_and_board(gql, http, settings)
    client = await NodeScript.start(app_folder / "relay", "run.mjs", **api, **scenario)
    try:
        said = await client.said()
        await client.finished()
    finally:
        client.kill()
    assert said == {"media": {"id": scenario["MEDIA_ID"], "viewCount": 1}}


async def _ranked_scenario(gql, http, services) -> tuple[str, list[str]]:
    """Six media by views, 6 down to 1, counts settled into the sort."""
    token, _ = await create_user(gql)
    tag = unique_name("ranked").lower()
    media = [(await create_media(http, token=token, tags=[tag]))["id"] for _ in range(6)]
    for media_id, views in zip(media, (6, 5, 4, 3, 2, 1), strict=True):
        await record_views(http, media_id=media_id, count=views)
    await _settle(services)
    return tag, media


async def _settle(services) -> None:
    await view_worker.flush(services)
    await view_worker.sync(services)


async def _page_through_with_media_moving_up(client: NodeScript, http, services, media: list[str]) -> dict:
    """Pages of two: after page 1 the last media jumps above the cursor, after page 2 the one before it."""
    jumps = {1: (media[5], 10), 2: (media[4], 20)}
    while True:
        said = await client.said()
        if "page" not in said:
            return said
        media_id, views = jumps[said["page"]]
        await record_views(http, media_id=media_id, count=views)
        await _settle(services)
        await client.answer({"go": True})


@pytest.mark.parametrize("folder", ["", "relay"])
async def test_omitted_media_are_kept_across_pages(folder, app_folder, api, gql, http, services):
    """Apollo's field policy and Relay's updater from docs/clients.md keep every page's omitted media."""
    if folder == "relay":
        compiled = run_tool(app_folder / "relay", "relay-compiler")
        assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    tag, media = await _ranked_scenario(gql, http, services)
    script = "run.mjs" if folder == "relay" else "apollo.mjs"
    client = await NodeScript.start(app_folder / folder, script, SCENARIO="omitted", TAG=tag, **api)
    try:
        final = await _page_through_with_media_moving_up(client, http, services, media)
        await client.finished()
    finally:
        client.kill()
    # Pages 1 and 2 served the first four; the two that moved up arrived in omitted, one a page.
    assert final["edges"] == media[:4]
    kept = final["keptOmitted"] if folder == "relay" else final["omitted"]
    assert kept == [media[5], media[4]]
    if folder == "relay":
        # What the connection handler alone keeps: the latest page's.
        assert final["lastPageOmitted"] == [media[4]]


async def test_the_legacy_subscriptions_transport_ws_client_is_served(app_folder, api, gql, http, settings):
    scenario = await _media_and_board(gql, http, settings)
    me = (await gql.ok("{ me { username } }", token=scenario["USER_TOKEN"]))["me"]
    client = await NodeScript.start(app_folder, "legacy.mjs", **api, **scenario)
    try:
        said = await client.said()
        await client.finished()
    finally:
        client.kill()
    assert said["errors"] == []
    pushed = said["pushed"]
    assert pushed[0] == {"data": {"viewCount": {"media": {"id": scenario["MEDIA_ID"], "viewCount": 0}}}}
    assert pushed[1] == {"data": {"viewCount": {"media": {"id": scenario["MEDIA_ID"], "viewCount": 1}}}}
    assert {"data": {"me": me}} in pushed
    not_found = [result for result in pushed if result.get("errors")]
    assert [error["extensions"]["code"] for result in not_found for error in result["errors"]] == ["NOT_FOUND"]


def _refetchable_fragments(schema_sdl: str) -> str:
    """A `@refetchable` fragment on every Node type, with each of its arguments-free leaf fields."""
    schema = build_schema()._schema
    blocks = []
    for name, graphql_type in sorted(schema.type_map.items()):
        if not is_object_type(graphql_type) or "Node" not in {i.name for i in graphql_type.interfaces}:
            continue
        leaves = [
            field_name
            for field_name, field in graphql_type.fields.items()
            if not field.args and field.deprecation_reason is None and is_scalar_type(get_named_type(field.type))
        ]
        blocks.append(
            f"  fragment refetch_{name[0].lower()}{name[1:]} on {name} "
            f'@refetchable(queryName: "refetch{name}Query") {{ {" ".join(leaves)} }}'
        )
    return 'import { graphql } from "relay-runtime";\n\n' + "".join(
        f"export const {fragment.split()[1]} = graphql`\n{fragment}\n`;\n" for fragment in blocks
    )


def test_relay_compiler_compiles_an_apps_documents_and_a_refetchable_fragment_on_every_node(app_folder, schema_sdl):
    (app_folder / "relay" / "src" / "refetch.js").write_text(_refetchable_fragments(schema_sdl))
    compiled = run_tool(app_folder / "relay", "relay-compiler")
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    generated = app_folder / "relay" / "src" / "__generated__"
    node_types = [
        name
        for name, graphql_type in build_schema()._schema.type_map.items()
        if is_object_type(graphql_type) and "Node" in {i.name for i in graphql_type.interfaces}
    ]
    assert len(node_types) >= 10
    for name in node_types:
        refetch = (generated / f"refetch{name}Query.graphql.js").read_text()
        assert "node(id: $id)" in refetch, name
    # Bidirectional pagination where the order allows it, forward only for the ranked list.
    assert '"direction": "bidirectional"' in (generated / "app_mediaList.graphql.js").read_text()
    assert '"direction": "forward"' in (generated / "app_rankedMedia.graphql.js").read_text()
    for subscription in ("appViewCountSubscription", "appLiveViewersSubscription", "appLeaderboardSubscription"):
        assert (generated / f"{subscription}.graphql.js").exists()


def test_graphql_codegen_maps_every_scalar_as_docs_clients_md_says(app_folder):
    (app_folder / "src").mkdir()
    shutil.copy(app_folder / "codegen" / "operations.graphql", app_folder / "src" / "operations.graphql")
    generated = run_tool(app_folder, "graphql-codegen", "--config", "codegen.yml")
    assert generated.returncode == 0, generated.stdout + generated.stderr
    types = (app_folder / "src" / "graphql.ts").read_text()
    scalars = re.search(r"export type Scalars = \{(.*?)\n\};", types, re.DOTALL)
    assert scalars is not None
    mapped = dict(re.findall(r"^  (\w+): \{ input: ([^;]+); output: [^;]+; \}", scalars[1], re.MULTILINE))
    assert mapped == {
        "ID": "string",
        "String": "string",
        "Boolean": "boolean",
        "Int": "number",
        "Float": "number",
        "Count": "number",
        "Date": "string",
        "DateTime": "string",
        "UUID": "string",
        "Upload": "File",
    }
    code = [line for line in types.splitlines() if not line.strip().startswith(("/*", "*"))]
    # codegen's own helper `Exact<T extends { [key: string]: unknown }>` aside, nothing is unknown or any.
    loose = [line for line in code if re.search(r"\b(unknown|any)\b", line) and not line.startswith("type Exact<")]
    assert loose == []
    assert "export type ViewCountSubscription = { viewCount: { media: { id: string, viewCount: number } } };" in types
    assert "sizeBytes: number, createdAt: string" in types


def test_graphql_eslint_relay_rules_pass_over_the_printed_schema(app_folder, schema_sdl):
    linted = run_tool(app_folder, "eslint", "schema.graphql")
    assert linted.returncode == 0, linted.stdout + linted.stderr
    # The rules do run: a connection that cannot page backward fails them.
    forward_only = re.sub(r"(newsfeed\(first: Int = null, after: String = null), last: Int = null, before: String = null", r"\1", schema_sdl)
    assert forward_only != schema_sdl
    (app_folder / "schema.graphql").write_text(forward_only)
    linted = run_tool(app_folder, "eslint", "schema.graphql")
    assert linted.returncode == 1
    assert "relay-arguments" in linted.stdout
