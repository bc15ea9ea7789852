from mediagraph.cli import app

app()
