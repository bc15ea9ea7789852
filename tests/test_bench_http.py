"""Every request `mediagraph bench http` sends to mediagraph is valid and answers with data.

The benchmark's documents run once each against an app over the rows the benchmark
loads (in databases of their own, so the bench's media never appear in other tests'
lists): a schema change that breaks one fails here instead of making the benchmark
measure errors. Speed is the benchmark's business, not this test's.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from benchmarks import http_data, http_writes
from benchmarks.http import beside, paired_ratio
from benchmarks.http_workloads import BY_ID, MEDIAGRAPH, PAGE_SIZE, READS, WORKLOADS, Listing, Workload, select
from benchmarks.http_writes import filled
from benchmarks.wrk import THREADS, LoadResult
from mediagraph import security
from mediagraph.db.endpoints import Endpoints
from mediagraph.db.provision import drop_database, provision
from mediagraph.ids import to_global_id
from mediagraph.settings import Settings
from tests.support.apps import app_with, private_prefix
from tests.support.graphql import GraphQLClient


@dataclass(frozen=True)
class Bench:
    gql: GraphQLClient
    settings: Settings
    media_ids: list[int]
    user_ids: list[int]

    def token(self, user_id: int, role: str = "user") -> str:
        return security.issue_token(self.settings, user_id=user_id, role=role, token_version=0)


@pytest.fixture(scope="module")
async def bench(endpoints: Endpoints, settings: Settings) -> AsyncIterator[Bench]:
    run = uuid.uuid4().hex[:8]
    server = make_url(endpoints.database_url)
    main = server.set(database=f"mgtest_bench_{run}").render_as_string(hide_password=False)
    shards = tuple(
        server.set(database=f"mgtest_bench_{run}_shard_{n}").render_as_string(hide_password=False) for n in range(2)
    )
    await provision(Endpoints(main, shards, endpoints.redis_url), logical_shards=settings.logical_shards)
    try:
        await http_data.load(main, media=300, users=20)
        overrides: dict[str, Any] = {
            "database_url": main,
            "shard_urls": list(shards),
            "redis_prefix": private_prefix(settings, "bench"),
        }
        async with app_with(settings, **overrides) as (services, gql):
            yield Bench(
                gql,
                services.settings,
                await http_data.sample_media_ids(main, 300),
                await http_data.user_ids(main),
            )
    finally:
        for url in (main, *shards):
            await drop_database(url)


def _edges(data: dict[str, Any], listing: Listing) -> list[dict[str, Any]]:
    return data[MEDIAGRAPH.list_field(listing)]["edges"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("workload", READS, ids=lambda workload: workload.key)
async def test_read_workload_answers_with_data(bench: Bench, workload: Workload) -> None:
    document = workload.document(MEDIAGRAPH)
    if workload.listing is None:
        data = await bench.gql.ok(document, {"id": to_global_id("Media", bench.media_ids[0])})
        assert data["media"]["id"] == to_global_id("Media", bench.media_ids[0])
        return
    # The first page, then the next through the cursor the benchmark's walk collects.
    walk = await bench.gql.ok(MEDIAGRAPH.walk_document(workload.listing), {"first": PAGE_SIZE, "after": None})
    info = walk[MEDIAGRAPH.list_field(workload.listing)]["pageInfo"]
    assert info["hasNextPage"]
    for after in (None, info["endCursor"]):
        edges = _edges(await bench.gql.ok(document, {"first": PAGE_SIZE, "after": after}), workload.listing)
        assert len(edges) == PAGE_SIZE
        assert all(edge["node"]["title"] for edge in edges)


async def _post(bench: Bench, body: str, token: str | None) -> dict[str, Any]:
    headers = {"content-type": "application/json"} | ({"authorization": f"Bearer {token}"} if token else {})
    response = await bench.gql.http.post("/graphql", content=body.encode(), headers=headers)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    assert not result.get("errors"), result["errors"]
    return result["data"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("key", http_writes.KEYS)
async def test_write_workload_bodies_succeed(bench: Bench, key: str) -> None:
    media_id = to_global_id("Media", bench.media_ids[1])
    liker = http_data.likers(bench.user_ids)[0]
    tokens = {
        http_writes.RECORD_VIEW_KEY: bench.token(bench.user_ids[0]),
        http_writes.LIKE_KEY: bench.token(liker),
        http_writes.REPORT_PLAYBACK_KEY: None,
        http_writes.SUBMIT_SCORE_KEY: bench.token(bench.user_ids[0], security.SERVICE_ROLE),
    }
    if key == http_writes.SUBMIT_SCORE_KEY:
        define = json.dumps({"query": http_writes.DEFINE_BOARD, "variables": {"n": http_writes.BOARD}})
        await _post(bench, define, tokens[key])
    bodies = http_writes.sample_bodies(key, media_id=media_id, user_id=to_global_id("User", bench.user_ids[2]))
    answers = [await _post(bench, body, tokens[key]) for body in bodies]
    assert all(answer and all(value is not None for value in answer.values()) for answer in answers)
    if key == http_writes.RECORD_VIEW_KEY:
        assert answers[0]["recordView"]["counted"] is True
    if key == http_writes.SUBMIT_SCORE_KEY:
        assert answers[0]["submitScore"]["changed"] is True


async def test_likers_hold_none_of_the_loaded_likes(bench: Bench) -> None:
    """So the like workload's likes always change a row, and its unlikes take back only its own likes."""
    query = "query($id: ID!) { media(id: $id) { likeCount viewerHasLiked } }"
    liker = bench.token(http_data.likers(bench.user_ids)[0])
    for media_id in bench.media_ids[:50]:
        data = await bench.gql.ok(query, {"id": to_global_id("Media", media_id)}, token=liker)
        assert data["media"]["viewerHasLiked"] is False


def test_only_selects_workloads_and_brings_the_yardstick_of_writes() -> None:
    assert [workload.key for workload in select(["tag-page"])] == ["tag-page"]
    assert [workload.key for workload in select(["record-view"])] == ["by-id", "record-view"]
    with pytest.raises(ValueError, match="unknown workload"):
        select(["no-such-workload"])


def test_a_write_is_compared_with_the_media_by_id_run_beside_it_in_each_round() -> None:
    (write,) = [workload for workload in WORKLOADS if workload.key == http_writes.LIKE_KEY]
    yardstick = beside(write)
    assert yardstick.beside == write.key
    assert yardstick.key != BY_ID.key
    assert yardstick.document(MEDIAGRAPH) == BY_ID.document(MEDIAGRAPH)

    def run(rps: float, cpu_seconds: float) -> LoadResult:
        return LoadResult(rps, 1.0, 2.0, int(rps * 10), 0, 0, cpu_seconds)

    # The machine ran at half speed in the second round: each round's pair says 0.5x, as
    # the ratio of medians taken apart (1,500 / 2,000 = 0.75x) would not.
    reads = [run(4_000, 10.0), run(2_000, 10.0)]
    writes = [run(2_000, 10.0), run(1_000, 10.0)]
    assert paired_ratio(reads, writes, cpu=False) == "0.50x"
    # CPU per request: 10 s over 40,000 reads against 10 s over 20,000 writes.
    assert paired_ratio(reads, writes, cpu=True) == "0.50x"


async def test_started_players_heartbeat_as_sessions_already_counted(bench: Bench) -> None:
    """The playback load's players are playing before the first run: their heartbeats there
    are a steady audience's, not sessions starting."""
    lines = http_writes.players(bench.media_ids, random.Random(7), per_thread=3)
    assert len(lines) == 3 * THREADS
    sessions = [uuid.UUID(line.split(" ")[0]) for line in lines]
    assert len(set(sessions)) == len(sessions)
    assert all(session.version == 4 for session in sessions)
    assert all(0 <= int(line.split(" ")[2]) < http_writes.PLAYBACK_BEATS for line in lines)
    await http_writes.first_heartbeats(bench.gql.http, "/graphql", lines, concurrency=2)
    for line in lines:
        session, media, _ = line.split(" ")
        answer = await _post(bench, filled(http_writes.REPORT_PLAYBACK_BODY, session, media), None)
        assert "TOTAL" not in answer["reportPlayback"]["counted"]
