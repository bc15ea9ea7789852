"""GraphiQL in headless Chromium that can reach only the server: it loads, queries, sends headers, subscribes."""

from __future__ import annotations

import contextlib
import json
from urllib.parse import quote

import httpx
import pytest
from playwright.async_api import Page, expect

from mediagraph.routes.assets import IMMUTABLE, LOCK_FILE, VENDOR_DIR
from tests.support.browser import GuardedPage, OpenPage
from tests.support.factories import create_media, create_post, create_user, follow, record_views

MEDIA_TITLE = 'query Title { media(id: "%s") { title } }'
ME = "query Me { me { username } }"
VIEW_COUNT = 'subscription Views { viewCount(mediaId: "%s") { viewCount } }'
NEWSFEED = "subscription Feed { newsfeedUpdated { post { text } } }"


@pytest.fixture(scope="module")
def server(live_servers):
    # With workers: the news feed reaches subscribers through the fan-out worker.
    return live_servers.start()


async def open_graphiql(guarded: GuardedPage, document: str) -> Page:
    page = guarded.page
    await page.goto(f"{guarded.origin}/graphql?q={quote(document)}")
    await expect(page.locator(".graphiql-execute-button")).to_be_visible()
    return page


async def set_headers(page: Page, headers: dict[str, str]) -> None:
    await page.locator(".graphiql-editor-tools button[data-name=headers]").click()
    editor = page.locator(".graphiql-editor-tool .graphiql-editor:not(.hidden) .CodeMirror")
    await editor.evaluate("(element, value) => element.CodeMirror.setValue(value)", json.dumps(headers))


async def run(page: Page) -> None:
    await page.locator(".graphiql-execute-button").click()


def assert_self_contained(guarded: GuardedPage) -> None:
    assert guarded.foreign == [], guarded.foreign
    assert guarded.failures == [], guarded.failures
    assert guarded.errors == [], guarded.errors


async def test_graphiql_loads_from_the_server_alone_and_runs_a_query(server, open_page: OpenPage, gql, http):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token, title="Harbor at night")
    guarded = await open_page(server)
    page = await open_graphiql(guarded, MEDIA_TITLE % media["id"])
    await run(page)
    await expect(page.locator(".graphiql-response")).to_contain_text('"title": "Harbor at night"')
    await page.get_by_label("Show GraphiQL Explorer").click()
    # The explorer lists the root fields from the schema the page fetched by introspection.
    await expect(page.locator(".graphiql-explorer-root")).to_contain_text("mediaList")
    assert_self_contained(guarded)


async def test_headers_editor_authorizes_queries(server, open_page: OpenPage, gql):
    token, user = await create_user(gql)
    guarded = await open_page(server)
    page = await open_graphiql(guarded, ME)
    await run(page)
    await expect(page.locator(".graphiql-response")).to_contain_text('"me": null')
    await set_headers(page, {"Authorization": f"Bearer {token}"})
    await run(page)
    await expect(page.locator(".graphiql-response")).to_contain_text(f'"username": "{user["username"]}"')
    assert_self_contained(guarded)


async def test_subscription_shows_live_view_counts(server, open_page: OpenPage, gql, http):
    token, _ = await create_user(gql)
    media = await create_media(http, token=token)
    guarded = await open_page(server)
    page = await open_graphiql(guarded, VIEW_COUNT % media["id"])
    await run(page)
    response = page.locator(".graphiql-response")
    await expect(response).to_contain_text('"viewCount": 0')
    async with httpx.AsyncClient(base_url=server) as client:
        assert await record_views(client, media_id=media["id"], count=2) == 2
    await expect(response).to_contain_text('"viewCount": 2')
    assert_self_contained(guarded)


async def test_subscription_sends_the_headers_in_connection_init(server, open_page: OpenPage, gql):
    (author_token, author), (fan_token, _) = await create_user(gql), await create_user(gql)
    await follow(gql, token=fan_token, user_id=author["id"])
    guarded = await open_page(server)
    page = await open_graphiql(guarded, NEWSFEED)
    await set_headers(page, {"Authorization": f"Bearer {fan_token}"})
    await run(page)
    # The subscription is sent once the execute button offers to stop it.
    await expect(page.get_by_label("Stop query (Ctrl-Enter)")).to_be_visible()
    response = page.locator(".graphiql-response")
    # The feed has no initial state to wait for, and a post published before the server
    # listens is not replayed: post again until one arrives.
    for attempt in range(12):
        await create_post(gql, token=author_token, text=f"Fresh from the harbor, take {attempt}")
        with contextlib.suppress(AssertionError):
            await expect(response).to_contain_text('"text": "Fresh from the harbor, take', timeout=5_000)
            break
    await expect(response).to_contain_text('"text": "Fresh from the harbor, take')
    assert_self_contained(guarded)


async def test_vendored_assets_are_versioned_and_cached_for_a_year(http):
    lock = json.loads(LOCK_FILE.read_text())
    package, entry = "graphiql", lock["graphiql"]
    response = await http.get(f"/assets/{package}@{entry['version']}/graphiql.min.js")
    assert response.status_code == 200
    assert response.headers["cache-control"] == IMMUTABLE
    assert (await http.get("/assets/graphiql@0.0.0/graphiql.min.js")).status_code == 404


def test_every_vendored_file_matches_its_locked_hash():
    from mediagraph.cli.assets import sri_hash
    from mediagraph.routes.assets import PINS

    lock = json.loads(LOCK_FILE.read_text())
    assert sorted(lock) == sorted(pin.name for pin in PINS)
    for pin in PINS:
        entry = lock[pin.name]
        assert entry["version"] == pin.version
        assert sorted(entry["files"]) == sorted(pin.files)
        for name, integrity in entry["files"].items():
            assert sri_hash((VENDOR_DIR / pin.folder / name).read_bytes()) == integrity, f"{pin.folder}/{name}"


async def test_graphiql_page_names_every_asset_with_its_version_and_hash(http):
    page = await http.get("/graphql", headers={"accept": "text/html"})
    assert page.status_code == 200
    assert page.headers["cache-control"] == "no-cache"
    assert "https://" not in page.text
    lock = json.loads(LOCK_FILE.read_text())
    for package in ("react", "react-dom", "graphiql", "@graphiql/plugin-explorer"):
        entry = lock[package]
        for name, integrity in entry["files"].items():
            assert f'"/assets/{package}@{entry["version"]}/{name}" integrity="{integrity}"' in page.text
