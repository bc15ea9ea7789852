"""Operating mediagraph: /metrics and who may read it, request ids, JSON logs, /readyz's reasons."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from mediagraph.app import create_app
from mediagraph.settings import Settings
from tests.support.apps import private_prefix, settings_with
from tests.support.factories import create_media, create_user, record_views
from tests.support.graphql import GraphQLClient
from tests.support.metrics import Samples, parse, scrape, value, wait_for_sample
from tests.support.otlp import TraceReceiver
from tests.support.servers import PrivateRedis

HISTOGRAM_COUNT = "mediagraph_graphql_operation_duration_seconds_count"
ERRORS = "mediagraph_graphql_errors_total"
BACKLOG = "mediagraph_worker_backlog"
METRICS_PORT = 9464
# A server process imports everything before it listens: minutes on a machine busy with other work.
SLOW_START = 240
DEAD_SHARD = "postgresql+asyncpg://postgres@127.0.0.1:1/nowhere"


def probe(name: str) -> str:
    return f"query {name} {{ me {{ id }} }}"


def unique_operation() -> str:
    return f"Probe{uuid.uuid4().hex[:10]}"


async def scrape_app(http: httpx.AsyncClient, **headers: str) -> Samples:
    response = await http.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    return parse(response.text)


@asynccontextmanager
async def serving(settings: Settings, **overrides: Any) -> AsyncIterator[dict[int, httpx.AsyncClient]]:
    """An app of its own, and a client for its main port (80) and the metrics port."""
    application = create_app(settings_with(settings, **overrides))
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application, client=("203.0.113.10", 40000))
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://mediagraph.test") as main,
            httpx.AsyncClient(transport=transport, base_url=f"http://mediagraph.test:{METRICS_PORT}") as metrics,
        ):
            yield {80: main, METRICS_PORT: metrics}


async def test_a_named_operation_run_n_times_counts_n_in_its_histogram(http, gql):
    name = unique_operation()
    for _ in range(7):
        await gql.ok(probe(name))
    samples = await scrape_app(http)
    assert value(samples, HISTOGRAM_COUNT, type="query", name=name) == 7


async def test_error_codes_are_counted(http, gql):
    before = await scrape_app(http)
    assert await gql.error_code('{ media(id: "not-an-id") { id } }') == "BAD_USER_INPUT"
    assert await gql.error_code("{ noSuchField }") == "GRAPHQL_VALIDATION_FAILED"
    after = await scrape_app(http)
    for code in ("BAD_USER_INPUT", "GRAPHQL_VALIDATION_FAILED"):
        assert value(after, ERRORS, code=code) - value(before, ERRORS, code=code) == 1


async def test_cache_and_execution_path_counters_move(http, gql):
    before = await scrape_app(http)
    query = probe(unique_operation())
    await gql.ok(query)
    await gql.ok(query)
    after = await scrape_app(http)

    def moved(metric: str, **labels: str) -> float:
        return value(after, metric, **labels) - value(before, metric, **labels)

    assert moved("mediagraph_graphql_document_cache_total", result="miss") >= 1
    assert moved("mediagraph_graphql_document_cache_total", result="hit") >= 1
    assert moved("mediagraph_graphql_executions_total", path="plan") >= 2


async def test_pool_usage_is_exported(http):
    samples = await scrape_app(http)
    for pool in ("orm", "reads", "writes"):
        assert (
            "mediagraph_postgres_connections",
            frozenset({"database": "main", "pool": pool, "state": "idle"}.items()),
        ) in samples
    assert ("mediagraph_redis_connections", frozenset({"state": "in_use"}.items())) in samples


async def test_operation_names_beyond_the_bound_count_as_other(settings):
    async with serving(settings, metrics_operation_names=2) as clients:
        http = clients[80]
        names = [unique_operation() for _ in range(3)]
        for name in names:
            response = await http.post("/graphql", json={"query": probe(name)})
            assert response.status_code == 200
        samples = await scrape_app(http)
        assert [value(samples, HISTOGRAM_COUNT, type="query", name=name) for name in names] == [1, 1, 0]
        assert value(samples, HISTOGRAM_COUNT, type="query", name="other") >= 1


async def test_the_request_id_sent_comes_back_sanitised_or_is_made_up(http):
    sent = await http.get("/healthz", headers={"x-request-id": "checkout-42"})
    assert sent.headers["x-request-id"] == "checkout-42"
    cleaned = await http.get("/healthz", headers={"x-request-id": 'a b<script>"c'})
    assert cleaned.headers["x-request-id"] == "abscriptc"
    bounded = await http.get("/healthz", headers={"x-request-id": "x" * 500})
    assert bounded.headers["x-request-id"] == "x" * 64
    made_up = [
        (await http.get("/healthz", headers=headers)).headers["x-request-id"]
        for headers in ({}, {"x-request-id": "<>"})
    ]
    assert all(made_up)
    assert made_up[0] != made_up[1]


async def test_errors_carry_the_request_id_in_their_extensions(http):
    response = await http.post(
        "/graphql", json={"query": '{ media(id: "not-an-id") { id } }'}, headers={"x-request-id": "ask-about-this"}
    )
    assert response.headers["x-request-id"] == "ask-about-this"
    error = response.json()["errors"][0]
    assert error["extensions"] == {"code": "BAD_USER_INPUT", "requestId": "ask-about-this"}


async def test_readyz_names_a_failing_shard_as_a_warning_and_stays_ready(settings):
    # Every process shares the shard: unready processes would take all of the API down with it.
    async with serving(settings, shard_urls=[settings.shard_urls[0], DEAD_SHARD]) as clients:
        response = await clients[80].get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["ready"] is True
    assert body["reasons"] == []
    assert body["checks"]["postgres"] == {"ok": True}
    assert body["checks"]["redis"] == {"ok": True}
    assert body["checks"]["shards"][0] == {"ok": True, "shard": 0}
    assert body["checks"]["shards"][1]["ok"] is False
    assert [warning for warning in body["warnings"] if warning.startswith("shard 1: ")] != []


async def test_readyz_is_not_ready_without_redis(settings, tmp_path):
    redis = PrivateRedis(tmp_path / "redis")
    redis.start()
    try:
        async with serving(settings, redis_url=redis.url) as clients:
            assert (await clients[80].get("/readyz")).status_code == 200
            redis.stop()
            response = await clients[80].get("/readyz")
    finally:
        redis.stop()
    assert response.status_code == 503
    body = response.json()
    assert body["ready"] is False
    assert body["checks"]["postgres"] == {"ok": True}
    assert [reason for reason in body["reasons"] if reason.startswith("redis: ")] == body["reasons"] != []


async def test_readyz_reports_workers_nobody_runs_as_warnings(http):
    body = (await http.get("/readyz")).json()
    assert body["ready"] is True
    views = body["checks"]["workers"]["views"]
    if not views["ok"]:
        assert "worker views: no process has run it recently (no heartbeat)" in body["warnings"]


async def test_on_the_metrics_port_only_metrics_answer(settings):
    async with serving(settings, metrics_port=METRICS_PORT) as clients:
        main, metrics = clients[80], clients[METRICS_PORT]
        assert (await main.get("/metrics")).status_code == 404
        assert (await main.get("/healthz")).status_code == 200
        assert (await metrics.get("/metrics")).status_code == 200
        assert (await metrics.get("/healthz")).status_code == 404
        assert (await metrics.post("/graphql", json={"query": "{ me { id } }"})).status_code == 404


async def test_production_without_token_or_port_has_no_metrics(settings, caplog):
    with caplog.at_level("INFO", logger="mediagraph.app"):
        async with serving(settings, environment="production", graphiql=False) as clients:
            assert (await clients[80].get("/metrics")).status_code == 404
    assert any("/metrics is off" in record.getMessage() for record in caplog.records)


async def test_the_token_opens_metrics_on_the_main_port(settings):
    async with serving(settings, environment="production", metrics_token="s3cret-token") as clients:
        main = clients[80]
        assert (await main.get("/metrics")).status_code == 401
        assert (await main.get("/metrics", headers={"authorization": "Bearer wrong"})).status_code == 401
        assert (await main.get("/metrics", headers={"authorization": "Bearer s3cret-token"})).status_code == 200


# Real `mediagraph serve` processes.


def test_metrics_are_refused_without_the_token_in_production(live_servers):
    base = live_servers.start(
        "--no-workers",
        ready_within=SLOW_START,
        MEDIAGRAPH_ENVIRONMENT="production",
        MEDIAGRAPH_METRICS_TOKEN="scrape-me-please",
    )
    assert httpx.get(f"{base}/metrics").status_code == 401
    assert httpx.get(f"{base}/metrics", headers={"authorization": "Bearer nope"}).status_code == 401
    assert scrape(base, token="scrape-me-please")


def test_json_log_lines_parse_and_carry_the_request_id(live_servers):
    base = live_servers.start(
        "--no-workers", ready_within=SLOW_START, MEDIAGRAPH_LOG_FORMAT="json", MEDIAGRAPH_LOG_SLOW_OPERATION_SECONDS="0"
    )
    response = httpx.post(f"{base}/graphql", json={"query": probe("Traced")}, headers={"x-request-id": "trace-me-42"})
    assert response.headers["x-request-id"] == "trace-me-42"
    log = live_servers.processes[-1].log  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10
    while True:
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        mine = [line for line in lines if line.get("request_id") == "trace-me-42"]
        if mine or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert mine, lines
    assert mine[0]["logger"] == "mediagraph.operations"
    assert "query Traced took" in mine[0]["message"]
    assert {"time", "level", "logger", "message"} <= set(mine[0])
    assert any(line["logger"].startswith("uvicorn") for line in lines)


def test_one_scrape_counts_every_process(live_servers):
    base = live_servers.start("--no-workers", "--processes", "2", ready_within=SLOW_START)
    name = unique_operation()
    for _ in range(12):
        # A connection each, so the kernel spreads them over both processes.
        with httpx.Client() as client:
            assert client.post(f"{base}/graphql", json={"query": probe(name)}).status_code == 200
    assert value(scrape(base), HISTOGRAM_COUNT, type="query", name=name) == 12


async def test_worker_lag_moves_while_its_worker_is_paused(live_servers):
    prefix = private_prefix(live_servers.settings, "lag")
    base = live_servers.start(
        "--no-workers", ready_within=SLOW_START, MEDIAGRAPH_REDIS_PREFIX=prefix, MEDIAGRAPH_METRICS_SAMPLE_SECONDS="0.2"
    )
    worker = live_servers.spawn("worker", "views", MEDIAGRAPH_REDIS_PREFIX=prefix)
    # Started, migrated and running once its heartbeat shows (slow to import on a busy machine).
    await asyncio.to_thread(
        wait_for_sample, base, "mediagraph_worker_up", lambda up: up == 1, timeout=180, worker="views"
    )
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        async with httpx.AsyncClient(base_url=base) as http:
            token, _ = await create_user(GraphQLClient(http))
            media = await create_media(http, token=token)
            assert await record_views(http, media_id=media["id"], count=5) == 5
        behind = await asyncio.to_thread(
            wait_for_sample, base, BACKLOG, lambda entries: entries >= 1, worker="views", queue="flush"
        )
        assert behind >= 1
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    await asyncio.to_thread(wait_for_sample, base, BACKLOG, lambda entries: entries == 0, worker="views", queue="flush")


def test_an_operation_is_traced_from_the_callers_traceparent_into_its_queries(live_servers):
    receiver = TraceReceiver()
    try:
        base = live_servers.start(
            "--no-workers",
            ready_within=SLOW_START,
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
            OTEL_BSP_SCHEDULE_DELAY="100",
            OTEL_SERVICE_NAME="mediagraph-under-test",
        )
        trace_id, caller_span = uuid.uuid4().hex, uuid.uuid4().hex[:16]
        response = httpx.post(
            f"{base}/graphql",
            json={"query": "query TracedList { mediaList(first: 2) { edges { node { id } } } }"},
            headers={"traceparent": f"00-{trace_id}-{caller_span}-01", "x-request-id": "follow-me"},
        )
        assert not response.json().get("errors"), response.json()
        operation = receiver.wait_for("query TracedList")
        assert operation.trace_id == trace_id
        assert operation.parent_span_id == caller_span
        assert operation.attributes["graphql.operation.type"] == "query"
        assert operation.attributes["graphql.operation.name"] == "TracedList"
        assert operation.attributes["mediagraph.request_id"] == "follow-me"
        deadline = time.monotonic() + 30
        while not (children := [span for span in receiver.spans if span.parent_span_id == operation.span_id]):
            assert time.monotonic() < deadline, [span.name for span in receiver.spans]
            time.sleep(0.1)
        assert all(child.trace_id == trace_id for child in children)
        assert any(child.attributes.get("db.system") in ("postgresql", "redis") for child in children), children
    finally:
        receiver.close()


async def test_the_dashboard_charts_only_metrics_that_exist(http):
    dashboard = (Path(__file__).parent.parent / "docs" / "grafana-dashboard.json").read_text()
    charted = {re.sub(r"_(bucket|count|sum)$", "", name) for name in re.findall(r"mediagraph_[a-z_]+", dashboard)}
    response = await http.get("/metrics")
    # HELP lines name every metric, also those without a sample yet (no error counted so far).
    exported = set(re.findall(r"^# HELP (mediagraph_[a-z_]+)", response.text, flags=re.MULTILINE))
    assert charted, "the dashboard charts nothing"
    assert charted <= exported, charted - exported
