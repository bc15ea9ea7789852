from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from sqlmodel import col, select

from mediagraph import security
from mediagraph.cli.runtime import configure_logging, open_services, provisioned
from mediagraph.db.endpoints import Endpoints
from mediagraph.db.users import User
from mediagraph.settings import Settings, get_settings

if TYPE_CHECKING:
    from mediagraph.demo.traffic import TrafficOptions

console = Console(stderr=True)


def migrate() -> None:
    """Create missing databases and migrate the main database and every shard."""
    configure_logging()
    with provisioned() as (_, endpoints):
        console.print(f"migrated main database and {len(endpoints.shard_urls)} shards")


def schema() -> None:
    """Print the public schema as SDL."""
    from mediagraph.serving.schema import build_schema

    print(build_schema().as_str())  # noqa: T201 - the SDL is this command's output


def load_demo(settings: Settings, *, users: int, media: int) -> None:
    from mediagraph.demo import load_demo as load

    if not asyncio.run(load(settings, users=users, media=media)):
        console.print("demo data is already loaded (user demo_0 exists); nothing added")


def demo(
    users: Annotated[int, typer.Option(min=1, max=10_000)] = 8,
    media: Annotated[int, typer.Option(min=0, max=1_000_000)] = 120,
    traffic: Annotated[bool, typer.Option(help="Then keep generating activity through the API until Ctrl-C.")] = False,
    rate: Annotated[float, typer.Option(min=0.1, max=200, help="Traffic: actions a second, on average.")] = 4.0,
    players: Annotated[int, typer.Option(min=0, max=500, help="Traffic: players sending heartbeats at once.")] = 6,
    screenshot: Annotated[
        Path | None,
        typer.Option(help="Then serve, run traffic and save a picture of /dashboard here (e.g. docs/dashboard.png)."),
    ] = None,
    screenshot_after: Annotated[
        float, typer.Option(min=5, max=3600, help="--screenshot: seconds of traffic before the picture.")
    ] = 90.0,
) -> None:
    """Load sample users (password `demo-password`) and media; `--traffic` keeps them busy."""
    configure_logging("WARNING")
    if traffic and screenshot is not None:
        raise typer.BadParameter("--screenshot runs its own traffic; leave out --traffic")
    with provisioned() as (settings, _):
        load_demo(settings, users=users, media=media)
        if screenshot is not None:
            _take_screenshot(settings, screenshot, users=users, seconds=screenshot_after, rate=rate, players=players)
        if traffic:
            from mediagraph.demo.traffic import TrafficOptions

            logging.getLogger("mediagraph.demo").setLevel(logging.INFO)
            asyncio.run(_run_traffic(settings, TrafficOptions(actions_per_second=rate, players=players), users=users))


def _take_screenshot(settings: Settings, path: Path, *, users: int, seconds: float, rate: float, players: int) -> None:
    from mediagraph.demo.screenshot import ScreenshotError, take_screenshot
    from mediagraph.demo.traffic import TrafficOptions

    logging.getLogger("mediagraph.demo").setLevel(logging.INFO)
    options = TrafficOptions(actions_per_second=rate, players=players)
    try:
        asyncio.run(take_screenshot(settings, path, users=users, traffic_seconds=seconds, options=options))
    except ScreenshotError as error:
        raise typer.BadParameter(str(error)) from None
    console.print(f"saved {path}")


async def _run_traffic(settings: Settings, options: TrafficOptions, *, users: int) -> None:
    from mediagraph.demo.traffic import run_in_process

    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopped.set)
    await run_in_process(settings, options, users=users, stopped=stopped)


def token(
    service: Annotated[
        bool, typer.Option("--service", help="A token for trusted services (e.g. submitScore).")
    ] = False,
    username: Annotated[str | None, typer.Option(help="A token for this existing user.")] = None,
    service_name: Annotated[int, typer.Option(help="Id recorded as the service's subject.")] = 1,
) -> None:
    """Issue an access token."""
    settings = get_settings()
    if service == (username is not None):
        raise typer.BadParameter("pass exactly one of --service or --username")
    if service:
        print(security.issue_token(settings, user_id=service_name, role=security.SERVICE_ROLE, token_version=0))  # noqa: T201
        return
    with provisioned(settings) as (resolved, endpoints):
        user = asyncio.run(_find_user(resolved, endpoints, username or ""))
    if user is None:
        raise typer.BadParameter(f"no user {username!r}")
    print(security.issue_token(settings, user_id=user.id, role=user.role, token_version=user.token_version))  # noqa: T201


async def _find_user(settings: Settings, endpoints: Endpoints, username: str) -> User | None:
    async with open_services(settings, endpoints) as services, services.databases.main_session() as session:
        return (await session.execute(select(User).where(col(User.username) == username.lower()))).scalar_one_or_none()
