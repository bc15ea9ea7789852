"""`mediagraph bench …`: each command runs one module of the `benchmarks` package.

The modules are imported when their command runs, so the server never loads them.
"""

from __future__ import annotations

from typing import Annotated

import typer

bench = typer.Typer(
    help="Benchmarks; each prints its figures and the ratios BENCHMARKS.md quotes.", no_args_is_help=True
)


@bench.command("playback")
def playback(
    heartbeats: Annotated[int, typer.Option(min=100, help="Heartbeats per path and round.")] = 2_000,
    concurrency: Annotated[int, typer.Option(min=1, max=512, help="Players sending at once.")] = 32,
    media: Annotated[int, typer.Option(min=1, max=10_000, help="Streams the heartbeats spread over.")] = 200,
    rounds: Annotated[int, typer.Option(min=1, max=20, help="Rounds the paths take turns in; medians reported.")] = 3,
) -> None:
    """Heartbeats per second through GraphQL, beside the Redis steps alone, and the roll-up."""
    from benchmarks import playback as benchmark

    benchmark.run(heartbeats=heartbeats, concurrency=concurrency, media=media, rounds=rounds)
