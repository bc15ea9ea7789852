"""`mediagraph bench …`: each command runs one module of the `benchmarks` package.

The modules are imported when their command runs, so the server never loads them.
"""

from __future__ import annotations

from typing import Annotated

import typer

bench = typer.Typer(
    help="Benchmarks; each prints its figures and the ratios BENCHMARKS.md quotes.", no_args_is_help=True
)


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
