"""`mediagraph shards …`: where logical shards live, and moving one to another physical shard."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mediagraph.cli.runtime import configure_logging, open_services, provisioned
from mediagraph.db.endpoints import Endpoints
from mediagraph.settings import Settings

shards = typer.Typer(
    help="Logical shards (media id mod L) and the physical shards that hold them.", no_args_is_help=True
)
console = Console(stderr=True)


@shards.command("move")
def move(
    logical: Annotated[int, typer.Argument(help="The logical shard to move.")],
    to: Annotated[int, typer.Option("--to", help="The physical shard to move it to.")],
    batch: Annotated[int, typer.Option(min=10, max=5_000, help="Rows copied per batch.")] = 1_000,
    grace: Annotated[
        float | None,
        typer.Option(min=0, help="Seconds old copies stay readable after the switch (default: settings)."),
    ] = None,
) -> None:
    """Move one logical shard's comments to another physical shard while reads and writes go on."""
    configure_logging("WARNING")
    with provisioned() as (settings, endpoints):
        asyncio.run(_move(settings, endpoints, logical=logical, target=to, batch=batch, grace=grace))


async def _move(
    settings: Settings, endpoints: Endpoints, *, logical: int, target: int, batch: int, grace: float | None
) -> None:
    from mediagraph.db.shards.moves import MoveRefused, move_logical_shard

    async with open_services(settings, endpoints) as services:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console) as bar:
            task = bar.add_task(f"logical shard {logical}", total=None)

            def show(phase: str, done: int, total: int) -> None:
                bar.update(task, description=f"logical shard {logical}: {phase}", completed=done, total=total or None)

            try:
                report = await move_logical_shard(
                    services, logical=logical, target=target, batch_size=batch, grace_seconds=grace, progress=show
                )
            except MoveRefused as refused:
                console.print(f"[red]{refused}[/]")
                raise typer.Exit(code=1) from None
    console.print(
        f"moved logical shard {report.logical} from physical shard {report.source} to {report.target}: "
        f"{report.copied} rows copied in {report.rounds} rounds"
    )


@shards.command("list")
def list_shards() -> None:
    """Print which physical shard holds each logical shard."""
    configure_logging("WARNING")
    with provisioned() as (settings, endpoints):
        placement = asyncio.run(_placement(settings, endpoints))
    table = Table(title="shard map")
    table.add_column("logical")
    table.add_column("physical")
    for logical, physical in enumerate(placement):
        table.add_row(str(logical), str(physical))
    Console().print(table)


async def _placement(settings: Settings, endpoints: Endpoints) -> list[int]:
    async with open_services(settings, endpoints) as services:
        router = services.databases.router
        return [router.physical_of_logical(logical) for logical in range(router.logical_shards)]
