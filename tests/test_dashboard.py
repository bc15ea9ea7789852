"""The live dashboard in headless Chromium that can reach only the server: it shows today's hot
media, moves their counts, follows a leaderboard and a channel's playback, and reconnects by
itself after the server restarts. The server runs on databases of its own, so today's hot
media are exactly the ones these tests make."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from playwright.async_api import Page, expect

from mediagraph.app import create_app
from mediagraph.routes.assets import LOCK_FILE
from tests.support.browser import GuardedPage, OpenPage
from tests.support.databases import private_databases
from tests.support.factories import create_media, create_user, record_views, service_token, unique_name
from tests.support.graphql import GraphQLClient
from tests.support.playback import new_session, report

LIKE = "mutation($id: ID!) { likeMedia(mediaId: $id) { likeCount } }"
DEFINE_BOARD = "mutation($name: String!) { defineLeaderboard(name: $name) { id } }"
SUBMIT = "mutation($board: String!, $user: ID!, $score: Float!) { submitScore(leaderboard: $board, userId: $user, score: $score) { changed } }"


@pytest.fixture(scope="module")
def server(live_servers, settings):
    # Workers on: views are flushed into the hot scores, engagement events applied, sessions swept.
    with private_databases(settings, "dash") as environment:
        yield live_servers.start(ready_within=180, **environment)
        live_servers.stop_all()


@pytest.fixture
async def api(server):
    async with httpx.AsyncClient(base_url=server, timeout=30) as http:
        yield http


async def open_dashboard(open_page: OpenPage, server: str, query: str = "") -> GuardedPage:
    guarded = await open_page(server)
    await guarded.page.goto(f"{server}/dashboard{query}")
    await expect(guarded.page.locator("#connection")).to_have_attribute("data-state", "connected")
    return guarded


def hot_row(page: Page, media_id: str):
    return page.locator(f'#hot-rows tr[data-media-id="{media_id}"]')


def assert_self_contained(guarded: GuardedPage) -> None:
    assert guarded.foreign == [], guarded.foreign
    assert guarded.failures == [], guarded.failures
    assert guarded.errors == [], guarded.errors


async def test_the_dashboard_shows_hot_media_by_title_after_views_are_recorded(server, api, open_page):
    gql = GraphQLClient(api)
    token, _ = await create_user(gql)
    media = await create_media(api, token=token, title="Lighthouse at dawn")
    guarded = await open_dashboard(open_page, server)
    page = guarded.page

    await record_views(api, media_id=media["id"], count=3)
    row = hot_row(page, media["id"])
    await expect(row.locator(".name")).to_have_text("Lighthouse at dawn")
    await expect(row.locator(".views")).to_have_text("3")
    await expect(page.locator("#problems")).to_have_text("")
    assert_self_contained(guarded)


async def test_a_new_like_moves_its_count_and_reorders_the_list(server, api, open_page):
    gql = GraphQLClient(api)
    token, _ = await create_user(gql)
    fan, _ = await create_user(gql)
    quiet = await create_media(api, token=token, title="Quiet cove")
    loved = await create_media(api, token=token, title="Loved lagoon")
    await record_views(api, media_id=quiet["id"], count=2)
    await record_views(api, media_id=loved["id"], count=1)
    guarded = await open_dashboard(open_page, server)
    page = guarded.page
    await expect(hot_row(page, loved["id"]).locator(".views")).to_have_text("1")
    await expect(hot_row(page, loved["id"]).locator(".likes")).to_have_text("0")

    await gql.ok(LIKE, {"id": loved["id"]}, token=fan)
    await expect(hot_row(page, loved["id"]).locator(".likes")).to_have_text("1")
    # 3 + 1 beats 2: the liked media moves above the other.
    titles = page.locator("#hot-rows tr .name")
    await expect(titles.filter(has_text="lagoon").or_(titles.filter(has_text="cove"))).to_have_text(
        ["Loved lagoon", "Quiet cove"]
    )
    assert_self_contained(guarded)


async def test_the_leaderboard_updates_after_submit_score(server, api, open_page, settings):
    gql = GraphQLClient(api)
    service = service_token(settings)
    board = unique_name("board").lower()
    await gql.ok(DEFINE_BOARD, {"name": board}, token=service)
    (_, ada), (_, bob) = await create_user(gql, nickname="Ada"), await create_user(gql, nickname="Bob")
    await gql.ok(SUBMIT, {"board": board, "user": ada["id"], "score": 40}, token=service)
    guarded = await open_dashboard(open_page, server)
    page = guarded.page
    await page.locator("#leaderboard-picker").select_option(board)
    rows = page.locator("#leaderboard-rows tr")
    await expect(rows).to_have_count(1)
    await expect(rows.nth(0)).to_contain_text("Ada")

    await gql.ok(SUBMIT, {"board": board, "user": bob["id"], "score": 75}, token=service)
    await expect(rows).to_have_count(2)
    await expect(rows.nth(0).locator(".player")).to_have_text("Bob")
    await expect(rows.nth(0).locator(".score")).to_have_text("75")
    await expect(rows.nth(1).locator(".player")).to_have_text("Ada")
    assert_self_contained(guarded)


async def test_the_playback_chart_follows_a_channels_viewers(server, api, open_page):
    gql = GraphQLClient(api)
    token, user = await create_user(gql, nickname="Channel nine")
    media = await create_media(api, token=token, title="Live from the pier")
    await record_views(api, media_id=media["id"], count=1)
    guarded = await open_dashboard(open_page, server, f"?channel={user['id']}")
    page = guarded.page
    await expect(page.locator("#channel-concurrent")).to_have_text("0")

    for session in (new_session(), new_session()):
        await report(gql, session, media["id"])
    await expect(page.locator("#channel-concurrent")).to_have_text("2")
    await expect(page.locator("#channel-peak")).to_have_text("2")
    await expect(page.locator("#chart rect.bar[data-peak='2']")).to_have_count(1)
    assert_self_contained(guarded)


async def test_the_page_reconnects_by_itself_after_the_server_restarts(server, api, open_page, live_servers):
    gql = GraphQLClient(api)
    token, _ = await create_user(gql)
    media = await create_media(api, token=token, title="Storm over the bay")
    await record_views(api, media_id=media["id"], count=1)
    guarded = await open_dashboard(open_page, server)
    page = guarded.page
    await expect(hot_row(page, media["id"]).locator(".views")).to_have_text("1")

    await asyncio.to_thread(live_servers.stop, server)
    await expect(page.locator("#connection")).to_have_attribute("data-state", "reconnecting")
    await asyncio.to_thread(live_servers.start_again, server, ready_within=180)
    await expect(page.locator("#connection")).to_have_attribute("data-state", "connected", timeout=120_000)

    # The subscriptions came back with the connection: new activity still reaches the page.
    async with httpx.AsyncClient(base_url=server, timeout=30) as again:
        fan, _ = await create_user(GraphQLClient(again))
        await GraphQLClient(again).ok(LIKE, {"id": media["id"]}, token=fan)
    await expect(hot_row(page, media["id"]).locator(".likes")).to_have_text("1")
    # Requests refused while the server was down are expected; nothing else may have failed.
    assert guarded.foreign == [], guarded.foreign
    assert guarded.errors == [], guarded.errors


async def page_status(settings, **overrides) -> int:
    """What GET /dashboard answers with these settings (the page needs no services)."""
    application = create_app(settings.model_copy(update=overrides))
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://mediagraph.test") as client:
        return (await client.get("/dashboard")).status_code


async def test_the_dashboard_is_off_in_production_unless_asked_for(settings):
    assert await page_status(settings) == 200
    assert await page_status(settings, environment="production") == 404
    assert await page_status(settings, environment="production", dashboard=True) == 200
    assert await page_status(settings, dashboard=False) == 404


async def test_the_page_names_its_one_script_with_its_version_and_hash(http):
    page = await http.get("/dashboard")
    assert page.status_code == 200
    assert page.headers["cache-control"] == "no-cache"
    # The one absolute URL is SVG's namespace, a name rather than an address.
    assert "https://" not in page.text
    assert "http://" not in page.text.replace('"http://www.w3.org/2000/svg"', "")
    entry = json.loads(LOCK_FILE.read_text())["graphql-ws"]
    [(name, integrity)] = entry["files"].items()
    assert f'"/assets/graphql-ws@{entry["version"]}/{name}" integrity="{integrity}"' in page.text
    assert (await http.get(f"/assets/graphql-ws@{entry['version']}/{name}")).status_code == 200
