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


@bench.command("feed")
def feed(
    followers: Annotated[int, typer.Option(min=1, help="Followers the fanned-out post reaches.")] = 10_000,
    followees: Annotated[
        int, typer.Option(min=1, help="Users the reader follows (1,000+ reads them in chunks).")
    ] = 1_000,
    posts_per_followee: Annotated[int, typer.Option(min=1, help="Posts each followee wrote over 3 days.")] = 20,
    samples: Annotated[int, typer.Option(min=1, help="First pages timed on each path.")] = 50,
    posts: Annotated[int, typer.Option(min=1, help="Posts fanned out (one at a time).")] = 5,
) -> None:
    """News feed first page from the cache vs a cold fan-in rebuild, and fan-out to many followers."""
    from benchmarks import feed as benchmark

    benchmark.run(
        followers=followers, followees=followees, posts_per_followee=posts_per_followee, samples=samples, posts=posts
    )
