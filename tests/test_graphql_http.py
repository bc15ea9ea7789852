"""The GraphQL-over-HTTP spec's audits (npm graphql-http, pinned in tests/clients/package.json)
against a running server: every audit must pass, with no warning and no error.

Installed with the other Node clients (tests/support/clients.py); without node or a registry
this test is skipped, unless CI is set: then it fails."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.support.clients import NodeScript


@pytest.fixture(scope="module")
def server(live_servers) -> str:
    return live_servers.start("--no-workers")


@pytest.fixture
def audit_folder(tmp_path, installed) -> Path:
    folder = tmp_path / "audit"
    folder.mkdir()
    (folder / "node_modules").symlink_to(installed / "node_modules", target_is_directory=True)
    (folder / "package.json").write_text('{"type": "module"}')
    (folder / "audit.mjs").write_text((Path(__file__).parent / "clients" / "audit.mjs").read_text())
    return folder


async def test_every_graphql_over_http_audit_passes(server, audit_folder, record_property):
    script = await NodeScript.start(audit_folder, "audit.mjs", AUDIT_URL=server + "/graphql")
    try:
        audits = await script.said(timeout=120)
        await script.finished()
    finally:
        script.kill()
    counts = Counter(audit["status"] for audit in audits)
    record_property("suite: graphql-http audits", len(audits))
    failing = [audit for audit in audits if audit["status"] != "ok"]
    assert not failing, json.dumps(failing, indent=1)
    assert counts["ok"] == len(audits) > 0


GRAPHQL_RESPONSE = "application/graphql-response+json"


def _post(base: str, query: str, accept: str, variables: dict | None = None) -> httpx.Response:
    return httpx.post(
        f"{base}/graphql", json={"query": query, "variables": variables or {}}, headers={"accept": accept}
    )


def test_request_errors_are_400_without_data_only_for_graphql_response_json(server):
    for query, variables, code in [
        ("{ me { username", None, "GRAPHQL_PARSE_FAILED"),
        ("{ noSuchField }", None, "GRAPHQL_VALIDATION_FAILED"),
        ("query($n: Int!) { me { username } }", {"n": "seven"}, "GRAPHQL_VALIDATION_FAILED"),
    ]:
        modern = _post(server, query, GRAPHQL_RESPONSE, variables)
        assert modern.status_code == 400
        assert modern.headers["content-type"].startswith(GRAPHQL_RESPONSE)
        assert "data" not in modern.json()
        assert modern.json()["errors"][0]["extensions"]["code"] == code
        legacy = _post(server, query, "application/json", variables)
        assert legacy.status_code == 200
        assert legacy.headers["content-type"] == "application/json"
        assert legacy.json()["data"] is None


def test_an_operation_that_ran_answers_200_with_its_errors(server):
    response = _post(server, '{ media(id: "nope") { id } }', GRAPHQL_RESPONSE)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(GRAPHQL_RESPONSE)
    body = response.json()
    assert "data" in body
    assert body["errors"][0]["path"]
    # A client preferring application/json keeps getting it.
    assert (
        _post(server, "{ me { username } }", f"{GRAPHQL_RESPONSE};q=0.5, application/json").headers["content-type"]
        == "application/json"
    )
