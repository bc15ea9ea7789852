"""The GraphQL fast path: persisted queries, the document cache, refusals, lookups shared across requests."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid

import pytest

from mediagraph.errors import PersistedQueryNotFound
from mediagraph.keys import KeySpace
from mediagraph.serving.documents import DocumentCache
from mediagraph.serving.persisted import PersistedQueries
from tests.support.factories import create_media, create_user

ME = "query { me { id } }"
MEDIA_TITLE = "query($id: ID!) { media(id: $id) { id title } }"
LOGIN = 'mutation { login(username: "nobody_here", password: "whatever!!") { token } }'


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def persisted(digest: str, version: int = 1) -> dict:
    return {"persistedQuery": {"version": version, "sha256Hash": digest}}


def unique_query() -> str:
    # A fresh text (and hash) per test: the store is shared by the whole run.
    return f"query Q{uuid.uuid4().hex} {{ me {{ id }} }}"


async def test_persisted_query_is_not_found_until_registered_with_its_text(http):
    query = unique_query()
    digest = sha256(query)
    missing = (await http.post("/graphql", json={"extensions": persisted(digest)})).json()
    assert missing["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"
    assert missing["errors"][0]["message"] == "PersistedQueryNotFound"

    registered = (await http.post("/graphql", json={"query": query, "extensions": persisted(digest)})).json()
    assert registered == {"data": {"me": None}}
    by_hash = (await http.post("/graphql", json={"extensions": persisted(digest)})).json()
    assert by_hash == {"data": {"me": None}}


async def test_registering_requires_the_hash_of_the_text(http):
    query = unique_query()
    wrong = sha256(query + " ")
    body = (await http.post("/graphql", json={"query": query, "extensions": persisted(wrong)})).json()
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    still_missing = (await http.post("/graphql", json={"extensions": persisted(wrong)})).json()
    assert still_missing["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"


async def test_invalid_documents_are_not_registered(http):
    query = f"query Q{uuid.uuid4().hex} {{ noSuchField }}"
    digest = sha256(query)
    body = (await http.post("/graphql", json={"query": query, "extensions": persisted(digest)})).json()
    assert body["errors"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    missing = (await http.post("/graphql", json={"extensions": persisted(digest)})).json()
    assert missing["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"


@pytest.mark.parametrize(
    "extensions",
    [
        {"persistedQuery": {"version": 2, "sha256Hash": "a" * 64}},
        {"persistedQuery": {"version": 1, "sha256Hash": "not-a-hash"}},
        {"persistedQuery": {"version": 1}},
        {"persistedQuery": "abc"},
    ],
)
async def test_malformed_persisted_query_extensions_are_bad_user_input(http, extensions):
    body = (await http.post("/graphql", json={"extensions": extensions})).json()
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


async def test_persisted_queries_run_over_get_but_mutations_do_not(http, gql):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token, title="Over GET")
    query = f"query Get{uuid.uuid4().hex}($id: ID!) {{ media(id: $id) {{ title }} }}"
    params = {"extensions": json.dumps(persisted(sha256(query))), "variables": json.dumps({"id": media["id"]})}
    missing = (await http.get("/graphql", params=params)).json()
    assert missing["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"
    registered = await http.get("/graphql", params={**params, "query": query})
    assert registered.json() == {"data": {"media": {"title": "Over GET"}}}
    assert (await http.get("/graphql", params=params)).json() == {"data": {"media": {"title": "Over GET"}}}

    await http.post("/graphql", json={"query": LOGIN, "extensions": persisted(sha256(LOGIN))})
    refused = await http.get("/graphql", params={"extensions": json.dumps(persisted(sha256(LOGIN)))})
    assert refused.status_code == 400
    assert "mutations are not allowed" in refused.text


async def test_persisted_query_registered_through_one_process_runs_on_another(live_servers):
    import httpx

    first, second = live_servers.start("--no-workers"), live_servers.start("--no-workers")
    query = unique_query()
    digest = sha256(query)
    async with httpx.AsyncClient() as client:
        registered = await client.post(f"{first}/graphql", json={"query": query, "extensions": persisted(digest)})
        assert registered.json() == {"data": {"me": None}}
        elsewhere = await client.post(f"{second}/graphql", json={"extensions": persisted(digest)})
        assert elsewhere.json() == {"data": {"me": None}}


async def test_persisted_query_store_keeps_the_most_recent(services):
    keys = KeySpace(f"mgtest:apq:{uuid.uuid4().hex}:")
    writer = PersistedQueries(local_size=10, max_stored=2)
    texts = [unique_query() for _ in range(3)]
    for text in texts:
        await writer.register(services.redis, keys, sha256(text), text)
    # Another process, with nothing cached locally, reads what Redis kept.
    reader = PersistedQueries(local_size=10, max_stored=2)
    assert await reader.lookup(services.redis, keys, sha256(texts[2])) == texts[2]
    assert await reader.lookup(services.redis, keys, sha256(texts[1])) == texts[1]
    with pytest.raises(PersistedQueryNotFound):
        await reader.lookup(services.redis, keys, sha256(texts[0]))
    await services.redis.delete(*[key async for key in services.redis.scan_iter(match=f"{keys.prefix}*")])


async def test_a_document_is_parsed_and_validated_once_and_invalid_ones_are_not_kept(app, gql):
    documents = app.graphql.runner.schema.documents
    query = f"query Cached{uuid.uuid4().hex} {{ me {{ id }} }}"
    await gql.ok(query)
    prepared = documents.cached(query)
    assert prepared is not None
    await gql.ok(query)
    assert documents.cached(query) is prepared

    size = len(documents)
    invalid = f"query Invalid{uuid.uuid4().hex} {{ nothing }}"
    assert await gql.error_code(invalid) == "GRAPHQL_VALIDATION_FAILED"
    assert await gql.error_code(invalid) == "GRAPHQL_VALIDATION_FAILED"
    assert documents.cached(invalid) is None
    assert len(documents) == size


async def test_limits_still_apply_to_a_document_seen_before(gql):
    aliases = "{ " + " ".join(f"a{n}: me {{ id }}" for n in range(40)) + " }"
    for _ in range(2):
        assert await gql.error_code(aliases) == "GRAPHQL_VALIDATION_FAILED"


def test_document_cache_is_bounded(app, settings):
    schema = app.graphql.runner.schema
    cache = DocumentCache(schema._schema, settings.model_copy(update={"document_cache_size": 2}))
    texts = [f"query Q{n} {{ me {{ id }} }}" for n in range(3)]
    for text in texts:
        cache.prepare(text)
    assert len(cache) == 2
    assert cache.cached(texts[0]) is None
    assert cache.cached(texts[2]) is not None


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "Unable to parse request body as JSON"),
        (b"[]", "Batching is not enabled"),
        (b"42", "must be a JSON object"),
        (b'{"query": 5}', "`query` must be a string"),
        (b'{"query": "{ me { id } }", "variables": []}', "`variables` must be an object"),
        (b'{"query": "{ me { id } }", "operationName": 3}', "`operationName` must be a string"),
        (b'{"variables": {}}', "No GraphQL query found"),
        (b'{"query": "query A { me { id } }", "operationName": "B"}', 'Unknown operation named "B"'),
        (b'{"query": "subscription { mediaUploaded { title } }"}', "subscriptions are not allowed"),
    ],
)
async def test_requests_that_are_not_graphql_get_a_plain_400(http, body, reason):
    response = await http.post("/graphql", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert reason in response.text


async def test_oversized_json_body_is_refused_before_parsing(http):
    huge = b'{"query": "' + b" " * (2 * 1024 * 1024) + b'{ me { id } }"}'
    response = await http.post("/graphql", content=huge, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["errors"][0]["extensions"]["code"] == "PAYLOAD_TOO_LARGE"


async def test_lookups_of_concurrent_requests_share_statements(http, gql, count_queries):
    token, _ = await create_user(gql)
    media = [await create_media(http, token=token, title=f"Shared {n}") for n in range(8)]
    count_queries.clear()
    results = await asyncio.gather(*(gql.ok(MEDIA_TITLE, {"id": item["id"]}) for item in media))
    assert [result["media"] for result in results] == [{"id": m["id"], "title": m["title"]} for m in media]
    assert len(count_queries) < len(media), count_queries


PAGE = "query($tags: [String!], $after: String) { mediaList(tags: $tags, first: 2, after: $after) { edges { node { title } } pageInfo { endCursor } } }"


async def test_pages_of_concurrent_requests_share_statements_and_stay_apart(http, gql, count_queries):
    token, _ = await create_user(gql)
    tag = f"pages{uuid.uuid4().hex[:8]}"
    for n in range(6):
        await create_media(http, token=token, title=f"Page item {n}", tags=[tag])
    cursors = [None]
    expected = []
    for _ in range(3):
        page = (await gql.ok(PAGE, {"tags": [tag], "after": cursors[-1]}))["mediaList"]
        expected.append([edge["node"]["title"] for edge in page["edges"]])
        cursors.append(page["pageInfo"]["endCursor"])
    count_queries.clear()
    requests = [cursor for cursor in cursors[:3] for _ in range(3)]
    pages = await asyncio.gather(*(gql.ok(PAGE, {"tags": [tag], "after": cursor}) for cursor in requests))
    titles = [[edge["node"]["title"] for edge in page["mediaList"]["edges"]] for page in pages]
    assert titles == [expected[n] for n in range(3) for _ in range(3)]
    assert expected == [["Page item 5", "Page item 4"], ["Page item 3", "Page item 2"], ["Page item 1", "Page item 0"]]
    assert len(count_queries) < len(requests), count_queries


@pytest.mark.parametrize(
    "query",
    [
        "query($id: ID!) { media(id: $id) { id } }",  # run from a plan
        "query($id: ID!) { node(id: $id) { id } }",  # an interface: graphql-core runs it
    ],
)
@pytest.mark.parametrize("variables", [{}, {"id": None}])
async def test_a_required_variable_missing_or_null_is_a_validation_error(gql, query, variables):
    body = await gql(query, variables)
    assert body["data"] is None
    assert [error["extensions"]["code"] for error in body["errors"]] == ["GRAPHQL_VALIDATION_FAILED"]
    assert "Variable '$id'" in body["errors"][0]["message"]
