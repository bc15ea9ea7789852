"""`mediagraph demo --screenshot`: the dashboard with demo data and traffic, as a PNG for the README.

The server runs in this process on a free loopback port, with its background workers;
demo traffic goes to it over HTTP, as `serve --demo --traffic` sends it; once the
counters have had time to move, headless Chromium (Debian's `chromium`, driven by
Playwright, a development dependency) opens /dashboard and takes the picture.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from mediagraph.demo.traffic import TrafficOptions, run_over_http
from mediagraph.settings import Settings

log = logging.getLogger(__name__)

CHROMIUM = "/usr/bin/chromium"
INSTALL = "apt-get install -y chromium"
BUSIEST_CHANNEL = "{ hotMedia { entries { media { uploader { id channelStats { total concurrent } } } } } }"
# How long the page may take to show what the picture should hold (a loaded machine is slow).
PAGE_TIMEOUT_MS = 120_000


class ScreenshotError(RuntimeError):
    """The picture cannot be taken here (no browser, no Playwright) or the page never filled."""


def chromium_executable() -> str:
    found = CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")
    if not found:
        raise ScreenshotError(f"Chromium is not installed; install Debian's with `{INSTALL}`")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _busiest_channel(base: str) -> str | None:
    """The uploader among today's hot media with the most viewers, so the chart has bars to show."""
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        response = await http.post("/graphql", json={"query": BUSIEST_CHANNEL})
    entries = (response.json().get("data") or {}).get("hotMedia", {}).get("entries", [])
    uploaders = {entry["media"]["uploader"]["id"]: entry["media"]["uploader"]["channelStats"] for entry in entries}
    ranked = sorted(uploaders, key=lambda user: (uploaders[user]["concurrent"] or 0, uploaders[user]["total"]))
    return ranked[-1] if ranked else None


@contextlib.asynccontextmanager
async def _serving(settings: Settings) -> AsyncIterator[str]:
    import uvicorn

    from mediagraph.app import create_app

    port = _free_port()
    config = uvicorn.Config(
        create_app(settings.model_copy(update={"run_workers": True, "dashboard": True})),
        host="127.0.0.1",
        port=port,
        log_level="warning",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                raise ScreenshotError("the server did not start")
            await asyncio.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def take_screenshot(
    settings: Settings, path: Path, *, users: int, traffic_seconds: float, options: TrafficOptions
) -> None:
    """Serve, keep demo traffic going for `traffic_seconds`, then photograph /dashboard into `path`."""
    try:
        from playwright.async_api import async_playwright, expect
    except ImportError:
        raise ScreenshotError("Playwright is a development dependency: run `uv sync` first") from None
    executable = chromium_executable()
    async with _serving(settings) as base:
        stopped = asyncio.Event()
        traffic = asyncio.create_task(run_over_http(base, settings, options, users=users, stopped=stopped))
        try:
            log.info("demo traffic for %.0f s before the picture", traffic_seconds)
            await asyncio.sleep(traffic_seconds)
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(
                    executable_path=executable, args=["--headless", "--no-sandbox", "--disable-gpu"], headless=True
                )
                try:
                    page = await browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
                    channel = await _busiest_channel(base)
                    await page.goto(f"{base}/dashboard" + (f"?channel={channel}" if channel else ""))
                    connection = page.locator("#connection")
                    await expect(connection).to_have_attribute("data-state", "connected", timeout=PAGE_TIMEOUT_MS)
                    for filled in ("#hot-rows tr", "#leaderboard-rows tr", "#chart rect.bar:not([data-peak='0'])"):
                        await expect(page.locator(filled).first).to_be_visible(timeout=PAGE_TIMEOUT_MS)
                    # A few pushes more, so the numbers on the picture are live ones.
                    await page.wait_for_timeout(5_000)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    await page.screenshot(path=str(path), full_page=True)
                finally:
                    await browser.close()
        finally:
            stopped.set()
            await traffic
