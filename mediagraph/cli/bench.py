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


@bench.command("views")
def views(
    views: Annotated[int, typer.Option(min=100, help="recordView requests, each from a distinct viewer.")] = 10_000,
    media: Annotated[int, typer.Option(min=1, help="Media the views are spread over.")] = 1_000,
    concurrency: Annotated[int, typer.Option(min=1, help="Keep-alive connections sending requests.")] = 64,
    subscribers: Annotated[int, typer.Option(min=1, help="viewCount subscribers on one server.")] = 200,
    pushes: Annotated[int, typer.Option(min=1, help="Views whose push latency is measured.")] = 20,
    cluster: Annotated[
        bool,
        typer.Option(
            "--cluster",
            help="Instead: recordView on one Redis and on a 3-master Redis Cluster (Debian's redis-server 7), "
            "side by side, and how the view keys spread over the nodes.",
        ),
    ] = False,
) -> None:
    """recordView throughput (beside media(id:)), flush rate, and viewCount push latency."""
    from benchmarks import views as benchmark

    if cluster:
        benchmark.run_cluster(views=views, media=media, concurrency=concurrency)
        return

    benchmark.run(views=views, media=media, concurrency=concurrency, subscribers=subscribers, pushes=pushes)


@bench.command("pagination")
def pagination(
    media: Annotated[int, typer.Option(min=1, help="Media in the list.")] = 210_000,
    page_size: Annotated[int, typer.Option(min=1, max=100, help="Media per page.")] = 20,
    depth: Annotated[int, typer.Option(min=2, help="The deep page measured beside page 2.")] = 10_000,
    changes: Annotated[int, typer.Option(min=0, help="Media whose counts change after the cursors.")] = 1_000,
    rounds: Annotated[int, typer.Option(min=1, help="Alternating rounds of measurement.")] = 10,
) -> None:
    """First page, page 2 and a deep page of the VIEWS sort side by side, and the cost of detecting omitted items."""
    from benchmarks import pagination as benchmark

    benchmark.run(media=media, page_size=page_size, depth=depth, changes=changes, rounds=rounds)


@bench.command("comments")
def comments(
    pages: Annotated[
        int, typer.Option(min=2, help="Thread length in pages; the deep page measured is the last.")
    ] = 10_000,
    size: Annotated[int, typer.Option(min=1, max=100, help="Comments per page.")] = 20,
    requests: Annotated[int, typer.Option(min=1, help="Requests per measured variant.")] = 200,
) -> None:
    """Thread page latency at page 1 and page N side by side; statements for a page of 50 media."""
    from benchmarks.comments import run

    run(pages=pages, size=size, requests=requests)


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
    cluster: Annotated[
        bool,
        typer.Option(
            "--cluster",
            help="Instead: submitScore on one Redis and on a 3-master Redis Cluster (Debian's redis-server 7), "
            "side by side, and where the keys landed.",
        ),
    ] = False,
) -> None:
    """submitScore throughput through GraphQL, rank lookups at 1 M and 10 M members, push latency to 1,000 subscribers."""
    if cluster:
        from benchmarks.leaderboard_cluster import run_cluster

        run_cluster(submissions=submissions, concurrency=concurrency)
        return
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


@bench.command("subscriptions")
def subscriptions(
    subscribers: Annotated[
        int, typer.Option(min=1, max=15_000, help="Websocket subscribers to one media's viewCount.")
    ] = 10_000,
    clients: Annotated[int, typer.Option(min=1, max=64, help="Client processes the sockets are spread over.")] = 4,
    rounds: Annotated[int, typer.Option(min=1, help="View count updates pushed to every subscriber.")] = 20,
    interval: Annotated[float, typer.Option(min=0.3, help="Seconds between updates (above the push interval).")] = 1.0,
    compare: Annotated[
        bool, typer.Option("--compare/--no-compare", help="Also run the subscription unshared, once per subscriber.")
    ] = True,
) -> None:
    """10,000 viewCount subscribers on one server process: update-to-receipt delay and memory per subscriber."""
    from benchmarks.subscriptions import Options, run

    run(Options(subscribers=subscribers, clients=clients, rounds=rounds, interval=interval, compare=compare))


@bench.command("http")
def http(
    media: Annotated[int, typer.Option(min=100, help="Rows in the media table.")] = 100_000,
    users: Annotated[int, typer.Option(min=2, help="Users: uploaders, likers, viewers and score entrants.")] = 1_000,
    seconds: Annotated[float, typer.Option(min=1, help="Length of each measured run.")] = 15,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds; each runs every workload on every server.")] = 3,
    connections: Annotated[int, typer.Option(min=1, help="Concurrent keep-alive connections.")] = 64,
    processes: Annotated[
        int | None,
        typer.Option(min=1, help="mediagraph server processes (default: the README's recommendation)."),
    ] = None,
    page_depth: Annotated[
        int, typer.Option(min=1, help="Page requests spread over the first N pages of each listing.")
    ] = 50,
    postgraphile: Annotated[
        bool, typer.Option("--postgraphile/--no-postgraphile", help="Install and measure PostGraphile 4 too.")
    ] = True,
    peer: Annotated[
        list[str] | None,
        typer.Option(help="A further peer to measure beside PostGraphile 4 (repeatable): postgraphile5."),
    ] = None,
    only: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated workloads to run (a write brings by-id along): by-id, views-page, "
            "uploader-page, likes-page, newest-page, tag-page, record-view, like-unlike, report-playback, "
            "submit-score."
        ),
    ] = None,
    profile: Annotated[
        bool,
        typer.Option(
            "--profile", help="py-spy the mediagraph process during each workload's first round (speedscope files)."
        ),
    ] = False,
) -> None:
    """mediagraph against PostGraphile under wrk: by-id reads and pages side by side; hot writes on mediagraph."""
    from benchmarks import http as benchmark
    from benchmarks.http_workloads import select
    from mediagraph.cli.processes import recommended_processes
    from mediagraph.settings import get_settings

    unknown_peers = sorted(set(peer or []) - set(benchmark.PEERS))
    if unknown_peers:
        raise typer.BadParameter(
            f"unknown peer(s) {', '.join(unknown_peers)}; choose from {', '.join(benchmark.PEERS)}"
        )
    keys = [key.strip() for key in only.split(",") if key.strip()] if only else None
    try:
        workloads = select(keys)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--only") from None
    if keys and all(workload.write for workload in select(keys) if workload.key in keys):
        # Writes are measured on mediagraph alone: no peer needs starting for their yardstick.
        postgraphile, peer = False, []
    if processes is None:
        processes = recommended_processes(get_settings().database_url or "postgresql://localhost/")
    benchmark.run(
        benchmark.Options(
            media=media,
            users=users,
            seconds=seconds,
            rounds=rounds,
            connections=connections,
            processes=processes,
            page_depth=page_depth,
            postgraphile=postgraphile,
            peers=tuple(peer or ()),
            workloads=workloads,
            profile=profile,
        )
    )


@bench.command("tracing")
def tracing(
    media: Annotated[int, typer.Option(min=100, help="Rows in the media table (each read by id in turn).")] = 20_000,
    seconds: Annotated[float, typer.Option(min=1, help="Length of each measured run.")] = 10,
    rounds: Annotated[
        int, typer.Option(min=1, help="Rounds; each starts every server afresh and runs it once, order rotating.")
    ] = 9,
    connections: Annotated[int, typer.Option(min=1, help="Concurrent keep-alive connections.")] = 64,
) -> None:
    """media(id:) with OpenTelemetry absent, installed but off, and on: what tracing costs (metrics on in all)."""
    from benchmarks import tracing as benchmark

    benchmark.run(benchmark.Options(media=media, seconds=seconds, rounds=rounds, connections=connections))
