"""The browser pages (GraphiQL, the dashboard) and the vendored packages they load, served by us.

The pages must work with no internet, so every script and stylesheet they use is a
pinned npm package committed under `mediagraph/static/vendor/<name>@<version>/`,
fetched by `mediagraph assets fetch` (cli/assets.py) and recorded in `lock.json` with
each file's SHA-384. Paths carry the version, so a file never changes under its URL:
browsers may keep it a year without asking again, and the pages name each file
with its hash (`integrity`) so a damaged copy is refused rather than run.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
VENDOR_DIR = STATIC_DIR / "vendor"
LOCK_FILE = VENDOR_DIR / "lock.json"
ASSETS_PATH = "/assets"
IMMUTABLE = "public, max-age=31536000, immutable"
# Pages are small and name the current asset versions: always revalidated.
PAGE_CACHE = "no-cache"


@dataclass(frozen=True)
class Pin:
    """An npm package the pages load, and the files of it they need."""

    name: str
    version: str
    files: tuple[str, ...]

    @property
    def folder(self) -> str:
        return f"{self.name}@{self.version}"


# GraphiQL as Strawberry's page loads it (same versions), and the websocket client the dashboard uses.
PINS = (
    Pin("react", "18.2.0", ("umd/react.production.min.js",)),
    Pin("react-dom", "18.2.0", ("umd/react-dom.production.min.js",)),
    Pin("graphiql", "3.8.3", ("graphiql.min.js", "graphiql.min.css")),
    Pin("@graphiql/plugin-explorer", "1.0.2", ("dist/index.umd.js", "dist/style.css")),
    Pin("graphql-ws", "6.4.2", ("umd/graphql-ws.min.js",)),
)

PLACEHOLDER = re.compile(r"\{\{ (script|style) (\S+) (\S+) \}\}")


class AssetError(RuntimeError):
    """A page names a package or file that is not vendored (run `mediagraph assets fetch`)."""


@functools.cache
def read_lock() -> dict[str, Any]:
    """`lock.json`: per package, the version, the tarball's integrity and each file's SHA-384."""
    return json.loads(LOCK_FILE.read_text())  # type: ignore[no-any-return]


def asset_tag(kind: str, package: str, file: str, *, root_path: str = "") -> str:
    entry = read_lock().get(package)
    if entry is None or file not in entry["files"]:
        raise AssetError(f"{package} {file} is not vendored; run `mediagraph assets fetch`")
    url = f"{root_path}{ASSETS_PATH}/{package}@{entry['version']}/{file}"
    integrity = entry["files"][file]
    if kind == "script":
        return f'<script src="{url}" integrity="{integrity}"></script>'
    return f'<link rel="stylesheet" href="{url}" integrity="{integrity}" />'


@functools.cache
def render_page(name: str, root_path: str = "") -> str:
    """A page of `static/`, its `{{ script package file }}` / `{{ style … }}` made into tags."""
    template = (STATIC_DIR / name).read_text()
    return PLACEHOLDER.sub(lambda match: asset_tag(*match.groups(), root_path=root_path), template)


def page_response(request: Request, name: str) -> HTMLResponse:
    html = render_page(name, request.scope.get("root_path", ""))
    return HTMLResponse(html, headers={"cache-control": PAGE_CACHE})


def graphiql_page(request: Request) -> HTMLResponse:
    return page_response(request, "graphiql.html")


async def dashboard_page(request: Request) -> HTMLResponse:
    return page_response(request, "dashboard.html")


class ImmutableFiles(StaticFiles):
    """Static files whose paths carry their version: cached by browsers for a year."""

    def file_response(self, *args: Any, **kwargs: Any) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers["cache-control"] = IMMUTABLE
        return response


def vendored_assets() -> ASGIApp:
    # GraphiQL's bundle is 3.5 MB of readable JavaScript; compressed it is a fifth of that.
    return GZipMiddleware(ImmutableFiles(directory=VENDOR_DIR), minimum_size=1024)
