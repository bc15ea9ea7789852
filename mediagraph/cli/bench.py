"""`mediagraph bench …`: each command runs one module of the `benchmarks` package.

The modules are imported when their command runs, so the server never loads them.
"""

from __future__ import annotations

from typing import Annotated

import typer

bench = typer.Typer(
    help="Benchmarks; each prints its figures and the ratios BENCHMARKS.md quotes.", no_args_is_help=True
)


@bench.command("leaderboard")
def leaderboard(
    submissions: Annotated[int, typer.Option(min=100, help="submitScore calls per throughput run.")] = 20_000,
    concurrency: Annotated[int, typer.Option(min=1, max=1_000, help="Concurrent HTTP clients.")] = 32,
    sizes: Annotated[
        str, typer.Option(help="Board sizes for rank lookups, comma-separated.")
    ] = "1000,1000000,10000000",
    lookups: Annotated[int, typer.Option(min=10, help="Rank lookups per board size.")] = 2_000,
    subscribers: Annotated[
        int, typer.Option(min=1, max=10_000, help="Websocket subscribers for push latency.")
    ] = 1_000,
    rounds: Annotated[int, typer.Option(min=1, help="Score changes pushed to every subscriber.")] = 20,
) -> None:
    """submitScore throughput through GraphQL, rank lookups at 1 M and 10 M members, push latency to 1,000 subscribers."""
    from benchmarks.leaderboard import Options, run

    board_sizes = sorted(int(size) for size in sizes.split(",") if size.strip())
    run(
        Options(
            submissions=submissions,
            concurrency=concurrency,
            sizes=board_sizes,
            lookups=lookups,
            subscribers=subscribers,
            rounds=rounds,
        )
    )
