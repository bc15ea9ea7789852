"""Headless Chromium for the browser tests: Debian's `chromium`, driven by Playwright.

Browser downloads cannot work here, so Playwright is pointed at the system browser.
Every page runs in a context that lets requests reach the server under test and
nothing else: a request or websocket to any other host is aborted and recorded, and
the tests assert that none was attempted (the pages must work with no internet).

Without a browser the tests skip, naming the install command; under CI (`CI=true`)
they fail instead, so a CI machine without one cannot pass by skipping.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pytest
import pytest_asyncio
from playwright.async_api import (
    Browser,
    BrowserContext,
    Page,
    Request,
    Route,
    WebSocketRoute,
    async_playwright,
    expect,
)

CHROMIUM = "/usr/bin/chromium"
INSTALL = "apt-get install -y chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
# Generous: the machine is shared, and a page may wait for a worker's next round.
WAIT_MS = 30_000
expect.set_options(timeout=WAIT_MS)


def chromium_executable() -> str:
    found = CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")
    if found:
        return found
    message = f"Chromium is not installed; install Debian's with `{INSTALL}`"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@dataclass
class GuardedPage:
    """A page that may talk to one origin only, with what it tried elsewhere and what broke."""

    page: Page
    origin: str
    foreign: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def chromium() -> AsyncIterator[Browser]:
    executable = chromium_executable()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=executable, args=list(FLAGS), headless=True)
        try:
            yield browser
        finally:
            await browser.close()


OpenPage = Callable[[str], Awaitable[GuardedPage]]


@pytest_asyncio.fixture(loop_scope="session")
async def open_page(chromium: Browser) -> AsyncIterator[OpenPage]:
    """Opens pages confined to the given server: `await open_page(base_url)`."""
    contexts: list[tuple[BrowserContext, GuardedPage]] = []

    async def open_confined(base: str) -> GuardedPage:
        context = await chromium.new_context(service_workers="block")
        context.set_default_timeout(WAIT_MS)
        guarded = GuardedPage(page=await context.new_page(), origin=base)
        allowed = urlsplit(base).netloc

        def foreign(url: str) -> bool:
            parts = urlsplit(url)
            return parts.scheme not in {"data", "blob", "about"} and parts.netloc != allowed

        async def route_request(route: Route) -> None:
            if foreign(route.request.url):
                guarded.foreign.append(route.request.url)
                await route.abort("blockedbyclient")
            else:
                await route.continue_()

        async def refuse_socket(socket: WebSocketRoute) -> None:
            guarded.foreign.append(socket.url)
            await socket.close(code=1008, reason="foreign host")

        def record_failure(request: Request) -> None:
            if not foreign(request.url):
                guarded.failures.append(f"{request.url}: {request.failure}")

        await context.route("**/*", route_request)
        await context.route_web_socket(foreign, refuse_socket)
        guarded.page.on("requestfailed", record_failure)
        guarded.page.on("pageerror", lambda error: guarded.errors.append(str(error)))
        contexts.append((context, guarded))
        return guarded

    yield open_confined
    for context, _ in contexts:
        await context.close()
    attempted = [url for _, guarded in contexts for url in guarded.foreign]
    assert not attempted, f"pages tried to reach other hosts: {attempted}"
