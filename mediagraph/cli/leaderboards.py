"""`mediagraph leaderboards …`: moving a live board to new partition bounds."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy import select

from mediagraph.cli.runtime import configure_logging, open_services, provisioned
from mediagraph.db.endpoints import Endpoints
from mediagraph.settings import Settings

leaderboards = typer.Typer(help="Leaderboards and their partitions.", no_args_is_help=True)
console = Console(stderr=True)


def parse_bounds(text: str) -> list[float]:
    try:
        return [float(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise typer.BadParameter("give the bounds as numbers separated by commas, e.g. 100,1000,10000") from None


@leaderboards.command("repartition")
def repartition_command(
    name: Annotated[str, typer.Argument(help="The leaderboard to move.")],
    bounds: Annotated[
        str,
        typer.Option("--bounds", help="The new ascending partition bounds, comma-separated ('' for one partition)."),
    ],
) -> None:
    """Move a leaderboard to new partition bounds while it keeps taking scores, and wait until done.

    The move runs here unless a server's leaderboards worker has taken it; either way this
    shows its progress, and stopping this command leaves a move that a worker resumes."""
    configure_logging("WARNING")
    wanted = parse_bounds(bounds)
    with provisioned() as (settings, endpoints):
        asyncio.run(_repartition(settings, endpoints, name=name, bounds=wanted))


async def _repartition(settings: Settings, endpoints: Endpoints, *, name: str, bounds: list[float]) -> None:
    from mediagraph.db.leaderboards import Leaderboard
    from mediagraph.errors import BadUserInput
    from mediagraph.resolvers.leaderboards import repartition
    from mediagraph.resolvers.leaderboards.definitions import checked_bounds

    async with open_services(settings, endpoints) as services:
        async with services.databases.main_session() as session:
            query = select(Leaderboard).where(Leaderboard.name == name.strip().lower())  # type: ignore[arg-type]
            definition = (await session.execute(query)).scalars().first()
            if definition is None:
                console.print(f"[red]No leaderboard named {name!r}.[/]")
                raise typer.Exit(code=1)
            try:
                started = await repartition.start(
                    session, definition, checked_bounds(bounds, low=definition.min_score, high=definition.max_score)
                )
            except BadUserInput as error:
                console.print(f"[red]{error}[/]")
                raise typer.Exit(code=1) from None
            except repartition.RepartitionRefused as refused:
                console.print(f"[red]A move to {refused.moving_to} is under way; ask again once it is done.[/]")
                raise typer.Exit(code=1) from None
        if started is None:
            console.print(f"{definition.name} already has the bounds {bounds}.")
            return
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console) as bar:
            task = bar.add_task(definition.name, total=None)

            async def show() -> None:
                while True:
                    newest = await repartition.latest(services, definition.id)
                    if newest is not None:
                        bar.update(
                            task,
                            description=f"{definition.name}: {newest.state.lower()}",
                            completed=newest.moved_entries,
                            total=max(newest.total_entries, newest.moved_entries) or None,
                        )
                    await asyncio.sleep(0.5)

            showing = asyncio.create_task(show())
            try:
                await repartition.carry_through(services, definition.id)
            finally:
                showing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await showing
        console.print(f"{definition.name}: partitions now split at {bounds}")
