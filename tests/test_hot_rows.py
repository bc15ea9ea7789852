"""Hot rows: recently read rows served from memory within a bound, never for credentials."""

from __future__ import annotations

import time

import httpx

from mediagraph.db.hot_rows import HotRows
from mediagraph.ids import decode_id
from tests.support.factories import create_media, create_user

MEDIA = "query($id: ID!) { media(id: $id) { title uploader { nickname } } }"
UPDATE = "mutation($id: ID!, $title: String) { updateMedia(id: $id, title: $title) { title } }"
ME = "query { me { id } }"


async def _sql(services, statement: str, *args) -> None:
    """A write behind the server's back, as another process makes it."""
    await services.databases.main_reads.fetch(statement, *args)


async def test_rows_written_elsewhere_show_after_the_bound_and_own_writes_at_once(live_servers, gql, http, services):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token, title="Before")
    raw_id = decode_id(media["id"], "Media")
    # A server keeping hot rows for a minute: long enough that what it serves below is its memory.
    base = live_servers.start("--no-workers", MEDIAGRAPH_HOT_READ_SECONDS="60")
    async with httpx.AsyncClient(base_url=base) as client:

        async def title() -> str:
            body = (await client.post("/graphql", json={"query": MEDIA, "variables": {"id": media["id"]}})).json()
            return body["data"]["media"]["title"]

        assert await title() == "Before"
        await _sql(services, "UPDATE media SET title = 'Elsewhere' WHERE id = $1", raw_id)
        assert await title() == "Before"
        mine = await client.post(
            "/graphql",
            json={"query": UPDATE, "variables": {"id": media["id"], "title": "Mine"}},
            headers={"authorization": f"Bearer {token}"},
        )
        assert mine.json()["data"]["updateMedia"]["title"] == "Mine"
        assert await title() == "Mine"


async def test_revoked_tokens_are_refused_at_once_even_when_the_user_is_hot(gql, http, services):
    token, user = await create_user(gql)
    media = await create_media(http, token=token)
    await gql.ok(MEDIA, {"id": media["id"]})  # the uploader's row is now hot
    await _sql(
        services, "UPDATE users SET token_version = token_version + 1 WHERE id = $1", decode_id(user["id"], "User")
    )
    assert await gql.error_code(ME, token=token) == "UNAUTHENTICATED"


def test_hot_rows_expire_and_are_bounded():
    rows = HotRows(seconds=0.05, max_entries=2)
    rows.put_all("media", {1: "one", 2: "two", 3: "three"})
    assert rows.get("media", 1) is None
    assert rows.get("media", 3) == "three"
    deadline = time.monotonic() + 5
    while rows.get("media", 3) is not None:
        assert time.monotonic() < deadline, "a hot row outlived its bound"
        time.sleep(0.01)
    off = HotRows(seconds=0, max_entries=10)
    off.put_all("media", {1: "one"})
    assert off.get("media", 1) is None
