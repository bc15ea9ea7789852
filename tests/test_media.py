from __future__ import annotations

import httpx
import pytest

from mediagraph.demo import png_image
from mediagraph.ids import decode_id
from mediagraph.settings import Settings
from tests.support.factories import create_media, create_user, unique_name, upload
from tests.support.graphql import WebSocketClient

MEDIA = "query($id: ID!) { media(id: $id) { id title tags uploader { username } viewerHasBookmarked } }"
NODE = "query($id: ID!) { node(id: $id) { __typename id ... on Media { title } ... on User { username } } }"
MEDIA_LIST = """
query($tags: [String!], $match: TagMatch!, $first: Int, $after: String) {
  mediaList(tags: $tags, tagMatch: $match, first: $first, after: $after) {
    edges { cursor node { id title } }
    pageInfo { hasNextPage endCursor }
  }
}
"""
UPDATE = "mutation($id: ID!, $title: String, $tags: [String!]) { updateMedia(id: $id, title: $title, tags: $tags) { title tags } }"
DELETE = "mutation($id: ID!) { deleteMedia(id: $id) { id } }"
BOOKMARK = "mutation($id: ID!) { bookmark(mediaId: $id) { viewerHasBookmarked } }"
UNBOOKMARK = "mutation($id: ID!) { unbookmark(mediaId: $id) { viewerHasBookmarked } }"
BOOKMARKS = "query($first: Int, $after: String) { me { bookmarks(first: $first, after: $after) { edges { node { id } } pageInfo { hasNextPage endCursor } } } }"
USER_MEDIA = "query($u: String!) { user(username: $u) { media(first: 100) { edges { node { id } } } } }"


async def _all_pages(gql, *, tags, match="ALL", first=2):
    ids, after = [], None
    while True:
        page = (await gql.ok(MEDIA_LIST, {"tags": tags, "match": match, "first": first, "after": after}))["mediaList"]
        ids += [edge["node"]["id"] for edge in page["edges"]]
        if not page["pageInfo"]["hasNextPage"]:
            return ids
        after = page["pageInfo"]["endCursor"]


async def test_upload_then_download_with_range(http):
    token, _ = await create_user_via(http)
    content = png_image(40, 30, (200, 10, 90))
    response = await upload(http, token=token, title="Sunset", tags=["Travel"], content=content)
    media = response.json()["data"]["uploadMedia"]
    assert media["tags"] == ["travel"]
    assert media["sizeBytes"] == len(content)

    whole = await http.get(media["contentUrl"])
    assert whole.status_code == 200
    assert whole.content == content
    assert whole.headers["content-type"] == "image/png"
    assert whole.headers["accept-ranges"] == "bytes"

    part = await http.get(media["contentUrl"], headers={"range": "bytes=10-19"})
    assert part.status_code == 206
    assert part.content == content[10:20]
    assert part.headers["content-range"] == f"bytes 10-19/{len(content)}"

    tail = await http.get(f"/media/{media['id']}/content", headers={"range": "bytes=-5"})
    assert tail.status_code == 206
    assert tail.content == content[-5:]

    beyond = await http.get(media["contentUrl"], headers={"range": f"bytes={len(content) + 10}-"})
    assert beyond.status_code == 416


async def create_user_via(http):
    from tests.support.graphql import GraphQLClient

    return await create_user(GraphQLClient(http))


async def test_download_of_unknown_or_malformed_id(http):
    assert (await http.get("/media/123456789/content")).status_code == 404
    assert (await http.get("/media/not-an-id/content")).status_code == 400


@pytest.mark.parametrize(
    ("content", "content_type", "message"),
    [
        (b"", "image/png", "empty"),
        (b"#!/bin/sh\nrm -rf /\n", "image/png", "does not match"),
        (png_image(4, 4, (1, 2, 3)), "application/x-sh", "not accepted"),
        (png_image(4, 4, (1, 2, 3)), "video/webm", "does not match"),
    ],
)
async def test_bad_uploads_are_rejected(http, content, content_type, message):
    token, _ = await create_user_via(http)
    body = (await upload(http, token=token, content=content, content_type=content_type)).json()
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert message in body["errors"][0]["message"]


async def test_oversized_upload_is_refused(http, settings):
    token, _ = await create_user_via(http)
    huge = png_image(4, 4, (1, 2, 3)) + b"\0" * (settings.max_upload_bytes + 10)
    response = await upload(http, token=token, content=huge)
    body = response.json()
    assert body["errors"][0]["extensions"]["code"] in ("BAD_USER_INPUT", "PAYLOAD_TOO_LARGE")


async def test_upload_requires_login(http):
    body = (await upload(http, token="")).json()
    assert body["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"


@pytest.mark.parametrize(
    ("title", "tags"),
    [
        ("", []),
        ("x" * 201, []),
        ("ok", ["bad tag"]),
        ("ok", ["x" * 33]),
        ("ok", [f"t{n}" for n in range(11)]),
        ("ok", ["<script>"]),
    ],
)
async def test_invalid_titles_and_tags_are_bad_user_input(http, title, tags):
    token, _ = await create_user_via(http)
    body = (await upload(http, token=token, title=title, tags=tags)).json()
    assert body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


async def test_tag_queries_all_and_any(http, gql):
    token, _ = await create_user(gql)
    a, b = unique_name("a"), unique_name("b")
    both = await create_media(http, token=token, tags=[a, b])
    only_a = await create_media(http, token=token, tags=[a])
    only_b = await create_media(http, token=token, tags=[b])
    assert await _all_pages(gql, tags=[a, b], match="ALL") == [both["id"]]
    assert await _all_pages(gql, tags=[a, b], match="ANY") == [only_b["id"], only_a["id"], both["id"]]
    assert await _all_pages(gql, tags=[a.upper()], match="ALL") == [only_a["id"], both["id"]]


async def test_pagination_reaches_the_end_without_duplicates_or_gaps(http, gql):
    token, _ = await create_user(gql)
    tag = unique_name("page")
    created = [(await create_media(http, token=token, tags=[tag]))["id"] for _ in range(7)]
    for first in (1, 2, 3, 7, 10):
        assert await _all_pages(gql, tags=[tag], first=first) == list(reversed(created))


@pytest.mark.parametrize("first", [0, -1, 101])
async def test_page_size_is_capped(gql, first):
    assert await gql.error_code(MEDIA_LIST, {"match": "ALL", "first": first}) == "BAD_USER_INPUT"


@pytest.mark.parametrize("cursor", ["garbage", "", "a" * 3000, "WyJtZWRpYTpuZXdlc3QiLFsxXV0"])
async def test_malformed_or_forged_cursors_are_bad_user_input(gql, cursor):
    assert await gql.error_code(MEDIA_LIST, {"match": "ALL", "after": cursor}) == "BAD_USER_INPUT"


async def test_cursor_of_another_listing_is_rejected(http, gql):
    token, _user = await create_user(gql)
    await create_media(http, token=token)
    await create_media(http, token=token)
    page = await gql.ok(BOOKMARKS, {"first": 1}, token=token)
    assert page["me"]["bookmarks"]["edges"] == []
    await gql.ok(BOOKMARK, {"id": (await create_media(http, token=token))["id"]}, token=token)
    await gql.ok(BOOKMARK, {"id": (await create_media(http, token=token))["id"]}, token=token)
    cursor = (await gql.ok(BOOKMARKS, {"first": 1}, token=token))["me"]["bookmarks"]["pageInfo"]["endCursor"]
    assert await gql.error_code(MEDIA_LIST, {"match": "ALL", "after": cursor}) == "BAD_USER_INPUT"


async def test_node_lookup_of_every_type(http, gql):
    token, user = await create_user(gql)
    media = await create_media(http, token=token, title="Node me")
    media_node = (await gql.ok(NODE, {"id": media["id"]}))["node"]
    assert media_node == {"__typename": "Media", "id": media["id"], "title": "Node me"}
    user_node = (await gql.ok(NODE, {"id": user["id"]}))["node"]
    assert user_node == {"__typename": "User", "id": user["id"], "username": user["username"]}


@pytest.mark.parametrize("node_id", ["!!!", "TWVkaWE6YWJj", "TWVkaWE6LTE", "Tm9wZToxMjM"])
async def test_malformed_or_unknown_ids(gql, node_id):
    result = await gql(NODE, {"id": node_id})
    if result.get("errors"):
        assert result["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    else:
        assert result["data"]["node"] is None


async def test_wrong_type_of_id_is_bad_user_input(gql):
    _, user = await create_user(gql)
    assert await gql.error_code(MEDIA, {"id": user["id"]}) == "BAD_USER_INPUT"


async def test_only_the_owner_edits_or_deletes(http, gql):
    owner, _ = await create_user(gql)
    stranger, _ = await create_user(gql)
    media = await create_media(http, token=owner, title="Mine")
    assert await gql.error_code(UPDATE, {"id": media["id"], "title": "Theirs"}, token=stranger) == "FORBIDDEN"
    assert await gql.error_code(DELETE, {"id": media["id"]}, token=stranger) == "FORBIDDEN"
    assert await gql.error_code(UPDATE, {"id": media["id"], "title": "Anon"}) == "UNAUTHENTICATED"
    updated = await gql.ok(UPDATE, {"id": media["id"], "title": "Renamed", "tags": ["New"]}, token=owner)
    assert updated["updateMedia"] == {"title": "Renamed", "tags": ["new"]}
    assert await gql.error_code(UPDATE, {"id": media["id"], "title": " "}, token=owner) == "BAD_USER_INPUT"
    assert (await gql.ok(DELETE, {"id": media["id"]}, token=owner))["deleteMedia"]["id"] == media["id"]
    assert (await gql.ok(MEDIA, {"id": media["id"]}))["media"] is None
    assert (await http.get(media["contentUrl"])).status_code == 404
    assert await gql.error_code(DELETE, {"id": media["id"]}, token=owner) == "NOT_FOUND"


async def test_bookmarks_are_idempotent_and_private(http, gql):
    token, user = await create_user(gql)
    other, _ = await create_user(gql)
    first = await create_media(http, token=other)
    second = await create_media(http, token=other)
    assert (await gql.ok(BOOKMARK, {"id": first["id"]}, token=token))["bookmark"]["viewerHasBookmarked"]
    await gql.ok(BOOKMARK, {"id": first["id"]}, token=token)
    await gql.ok(BOOKMARK, {"id": second["id"]}, token=token)
    page = (await gql.ok(BOOKMARKS, {"first": 10}, token=token))["me"]["bookmarks"]
    assert [edge["node"]["id"] for edge in page["edges"]] == [second["id"], first["id"]]
    assert not (await gql.ok(UNBOOKMARK, {"id": second["id"]}, token=token))["unbookmark"]["viewerHasBookmarked"]
    page = (await gql.ok(BOOKMARKS, {"first": 10}, token=token))["me"]["bookmarks"]
    assert [edge["node"]["id"] for edge in page["edges"]] == [first["id"]]
    query = "query($u: String!) { user(username: $u) { bookmarks { edges { node { id } } } } }"
    assert await gql.error_code(query, {"u": user["username"]}, token=other) == "FORBIDDEN"


async def test_user_media_lists_uploads_newest_first(http, gql):
    token, user = await create_user(gql)
    ids = [(await create_media(http, token=token))["id"] for _ in range(3)]
    data = await gql.ok(USER_MEDIA, {"u": user["username"]})
    assert [edge["node"]["id"] for edge in data["user"]["media"]["edges"]] == list(reversed(ids))


async def test_page_of_100_media_with_uploaders_runs_constant_queries(http, gql, count_queries):
    tag = unique_name("qc")
    for _ in range(5):
        token, _ = await create_user(gql)
        for _ in range(20):
            await create_media(http, token=token, tags=[tag])
    query = "query($t: [String!]) { mediaList(tags: $t, first: 100) { edges { node { id title uploader { id nickname } viewerHasBookmarked } } } }"
    count_queries.clear()
    data = await gql.ok(query, {"t": [tag]}, token=token)
    assert len(data["mediaList"]["edges"]) == 100
    # One for the page, one for all uploaders, one for the viewer's bookmarks, one for the viewer.
    assert len(count_queries) <= 4, count_queries


async def test_query_limits(gql):
    nested = "id"
    for _ in range(5):
        nested = f"uploader {{ media {{ edges {{ node {{ {nested} }} }} }} }}"
    deep = f"{{ mediaList {{ edges {{ node {{ {nested} }} }} }} }}"
    assert await gql.error_code(deep) == "GRAPHQL_VALIDATION_FAILED"
    aliases = "{ " + " ".join(f"a{n}: me {{ id }}" for n in range(40)) + " }"
    assert await gql.error_code(aliases) == "GRAPHQL_VALIDATION_FAILED"
    assert await gql.error_code("{ me { id ") == "GRAPHQL_PARSE_FAILED"


async def test_get_requests_run_queries_but_not_mutations(http):
    response = await http.get("/graphql", params={"query": "{ me { id } }"})
    assert response.json() == {"data": {"me": None}}
    response = await http.get(
        "/graphql", params={"query": 'mutation { login(username: "x", password: "y") { token } }'}
    )
    assert response.status_code in (400, 405)


async def test_health_endpoints(http):
    assert (await http.get("/healthz")).json() == {"status": "ok"}
    ready = (await http.get("/readyz")).json()
    assert ready["ready"] is True
    assert ready["reasons"] == []
    assert ready["checks"]["postgres"] == {"ok": True}
    assert ready["checks"]["shards"] == [{"ok": True, "shard": 0}, {"ok": True, "shard": 1}]


CONTENT_URL = "query($id: ID!) { media(id: $id) { contentUrl } }"
CONTENT_URL_PUSH = "subscription($id: ID!) { viewCount(mediaId: $id) { media { id contentUrl } } }"


async def test_content_url_is_absolute_on_the_origin_the_request_came_to(http, gql):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    raw_id = decode_id(media["id"], "Media")
    assert media["contentUrl"] == f"http://mediagraph.test/media/{raw_id}/content"
    other = await http.post(
        "/graphql",
        json={"query": CONTENT_URL, "variables": {"id": media["id"]}},
        headers={"host": "cdn-less.example:8443"},
    )
    assert other.json()["data"]["media"]["contentUrl"] == f"http://cdn-less.example:8443/media/{raw_id}/content"


async def _content_url_pushed(base: str, media_id: str) -> str:
    client = await WebSocketClient.connect(base.replace("http://", "ws://") + "/graphql")
    try:
        assert (await client.receive())["type"] == "connection_ack"
        await client.subscribe(CONTENT_URL_PUSH, {"id": media_id})
        message = await client.receive()
        assert message["type"] == "next", message
        return message["payload"]["data"]["viewCount"]["media"]["contentUrl"]  # type: ignore[no-any-return]
    finally:
        await client.close()


async def test_content_url_behind_a_trusted_proxy_and_in_pushes(live_servers, http, gql):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    raw_id = decode_id(media["id"], "Media")
    base = live_servers.start("--no-workers")
    async with httpx.AsyncClient(base_url=base) as client:
        # uvicorn trusts the loopback proxy by default: its X-Forwarded-Proto sets the scheme.
        proxied = await client.post(
            "/graphql",
            json={"query": CONTENT_URL, "variables": {"id": media["id"]}},
            headers={"x-forwarded-proto": "https", "host": "media.example"},
        )
    assert proxied.json()["data"]["media"]["contentUrl"] == f"https://media.example/media/{raw_id}/content"
    # Without MEDIAGRAPH_PUBLIC_URL a push is built on each subscriber's own origin.
    assert await _content_url_pushed(base, media["id"]) == f"{base}/media/{raw_id}/content"

    public = live_servers.start("--no-workers", MEDIAGRAPH_PUBLIC_URL="https://api.example.com/v1/")
    async with httpx.AsyncClient(base_url=public) as client:
        configured = await client.post("/graphql", json={"query": CONTENT_URL, "variables": {"id": media["id"]}})
        assert configured.json()["data"]["media"]["contentUrl"] == f"https://api.example.com/v1/media/{raw_id}/content"
    assert await _content_url_pushed(public, media["id"]) == f"https://api.example.com/v1/media/{raw_id}/content"


@pytest.mark.parametrize("url", ["api.example.com", "ftp://api.example.com", "https://api.example.com/?q=1"])
def test_a_public_url_that_is_not_an_absolute_http_url_is_refused(url):
    with pytest.raises(ValueError, match="public_url"):
        Settings(public_url=url)


BOOKMARK_MEDIA = "mutation($id: ID!) { bookmarkMedia(mediaId: $id) { id viewerHasBookmarked } }"
UNBOOKMARK_MEDIA = "mutation($id: ID!) { unbookmarkMedia(mediaId: $id) { id viewerHasBookmarked } }"
USER_AND_BOOKMARKS = "query($u: String!) { user(username: $u) { username bookmarks { edges { node { id } } } } }"


async def test_bookmark_media_pairs_with_unbookmark_media_and_others_bookmarks_are_null(http, gql):
    token, user = await create_user(gql)
    other, _ = await create_user(gql)
    media = await create_media(http, token=other)
    marked = (await gql.ok(BOOKMARK_MEDIA, {"id": media["id"]}, token=token))["bookmarkMedia"]
    assert marked == {"id": media["id"], "viewerHasBookmarked": True}
    unmarked = (await gql.ok(UNBOOKMARK_MEDIA, {"id": media["id"]}, token=token))["unbookmarkMedia"]
    assert unmarked == {"id": media["id"], "viewerHasBookmarked": False}
    # A permission nulls the field alone: the user is still there.
    result = await gql(USER_AND_BOOKMARKS, {"u": user["username"]}, token=other)
    assert result["data"] == {"user": {"username": user["username"], "bookmarks": None}}
    assert result["errors"][0]["extensions"]["code"] == "FORBIDDEN"
    assert result["errors"][0]["path"] == ["user", "bookmarks"]


EVERY_FIELD = (
    "id title description tags contentType filename sizeBytes createdAt updatedAt contentUrl "
    "viewCount likeCount commentCount viewerHasBookmarked viewerHasLiked uploader { id username nickname }"
)


async def test_media_by_id_answers_as_the_node_lookup_and_the_lists_do(http, gql):
    """`media(id:)` builds its object from the plain row; `node(id:)` from a model instance;
    a list from its page's rows: the same media reads the same through each."""
    token, _ = await create_user(gql)
    tag = unique_name("same")
    media = await create_media(http, token=token, tags=[tag, "other"], title="Same everywhere")
    await gql.ok(BOOKMARK, {"id": media["id"]}, token=token)
    variables = {"id": media["id"]}
    by_id = (await gql.ok(f"query($id: ID!) {{ media(id: $id) {{ {EVERY_FIELD} }} }}", variables, token=token))["media"]
    node = (
        await gql.ok(
            f"query($id: ID!) {{ node(id: $id) {{ ... on Media {{ {EVERY_FIELD} }} }} }}", variables, token=token
        )
    )["node"]
    listed = (
        await gql.ok(
            f'query {{ mediaList(tags: ["{tag}"], first: 1) {{ edges {{ node {{ {EVERY_FIELD} }} }} }} }}', token=token
        )
    )["mediaList"]["edges"][0]["node"]
    assert by_id == node == listed
    assert by_id["title"] == "Same everywhere"
    assert by_id["tags"] == [tag, "other"]
    assert by_id["viewerHasBookmarked"] is True
    missing = (await gql.ok("query($id: ID!) { media(id: $id) { id } }", {"id": "TWVkaWE6MQ"}))["media"]
    assert missing is None


@pytest.mark.parametrize(
    ("document", "variables", "code"),
    [
        # A literal is refused as the document is validated; a variable as it is coerced.
        (
            'mutation { uploadMedia(file: "\\r\\u0004S", title: "Ⱥ", description: "") { id } }',
            {},
            "GRAPHQL_VALIDATION_FAILED",
        ),
        ('mutation($f: Upload!) { uploadMedia(file: $f, title: "Ⱥ") { id } }', {"f": "not a file"}, "BAD_USER_INPUT"),
        (
            'mutation($f: Upload!) { uploadMedia(file: $f, title: "Ⱥ") { id } }',
            {"f": {"name": "a.png"}},
            "BAD_USER_INPUT",
        ),
    ],
    ids=["literal", "string variable", "object variable"],
)
async def test_an_upload_that_is_not_a_file_is_refused(http, document, variables, code):
    """Only a multipart request's file part is a file; text in its place is refused, never a server error."""
    token, _ = await create_user_via(http)
    response = await http.post(
        "/graphql", json={"query": document, "variables": variables}, headers={"authorization": f"Bearer {token}"}
    )
    errors = response.json()["errors"]
    assert [error["extensions"]["code"] for error in errors] == [code], errors
    assert "multipart" in errors[0]["message"]
