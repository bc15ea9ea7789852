"""`mediagraph bench …`: each command runs one module of the `benchmarks` package.

The modules are imported when their command runs, so the server never loads them.
"""

from __future__ import annotations

import typer

bench = typer.Typer(
    help="Benchmarks; each prints its figures and the ratios BENCHMARKS.md quotes.", no_args_is_help=True
)
