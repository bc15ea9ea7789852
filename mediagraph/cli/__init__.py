"""The `mediagraph` command line."""

from __future__ import annotations

import typer

from mediagraph.cli import admin, serve
from mediagraph.cli.assets import assets
from mediagraph.cli.bench import bench
from mediagraph.cli.leaderboards import leaderboards
from mediagraph.cli.shards import shards

app = typer.Typer(
    help="mediagraph: a GraphQL API with real-time subscriptions for a media service.", no_args_is_help=True
)
app.command()(serve.serve)
app.command()(serve.worker)
app.command()(admin.migrate)
app.command()(admin.schema)
app.command()(admin.demo)
app.command()(admin.token)
app.add_typer(assets, name="assets")
app.add_typer(bench, name="bench")
app.add_typer(leaderboards, name="leaderboards")
app.add_typer(shards, name="shards")
