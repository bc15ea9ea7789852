"""`mediagraph assets fetch`: the pages' npm packages, downloaded from the registry and committed.

Each pinned version's tarball is fetched from the npm registry, checked against the
registry's own integrity hash, and the files the pages need (plus the licence and
package.json) are written to `static/vendor/<name>@<version>/`. Folders of versions
no longer pinned are removed, and `lock.json` records what was written.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import httpx
import typer
from rich.console import Console

from mediagraph.routes.assets import LOCK_FILE, PINS, VENDOR_DIR, Pin

console = Console(stderr=True)
assets = typer.Typer(help="The vendored browser assets of GraphiQL and the dashboard.", no_args_is_help=True)

DEFAULT_REGISTRY = "https://registry.npmjs.org"
# Kept beside the files the pages load, so the copy says what it is and under which licence.
RECORDS = ("package.json", "LICENSE", "LICENSE.md", "LICENSE.txt")


@assets.command("fetch")
def fetch(
    registry: Annotated[str, typer.Option(help="npm registry to fetch from.")] = DEFAULT_REGISTRY,
) -> None:
    """Download the pinned packages (routes/assets.py PINS) into mediagraph/static/vendor/."""
    base = registry.rstrip("/")
    lock: dict[str, Any] = {}
    with httpx.Client(timeout=120, follow_redirects=True) as client:
        for pin in PINS:
            lock[pin.name] = vendor_package(client, base, pin)
            console.print(f"{pin.folder}: {', '.join(pin.files)}")
    remove_unpinned()
    LOCK_FILE.write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    console.print(f"wrote {LOCK_FILE}")


def vendor_package(client: httpx.Client, registry: str, pin: Pin) -> dict[str, Any]:
    metadata = client.get(f"{registry}/{quote(pin.name, safe='@')}/{pin.version}")
    metadata.raise_for_status()
    dist = metadata.json()["dist"]
    tarball = client.get(dist["tarball"])
    tarball.raise_for_status()
    verify_integrity(tarball.content, dist["integrity"], pin)
    target = VENDOR_DIR / pin.folder
    shutil.rmtree(target, ignore_errors=True)
    files: dict[str, str] = {}
    with tarfile.open(fileobj=io.BytesIO(tarball.content), mode="r:gz") as archive:
        members = {member.name.removeprefix("package/"): member for member in archive.getmembers() if member.isfile()}
        for name in (*pin.files, *(record for record in RECORDS if record in members)):
            member = members.get(name)
            if member is None:
                raise typer.BadParameter(f"{pin.folder} has no file {name}")
            content = archive.extractfile(member).read()  # type: ignore[union-attr]
            write_file(target / name, content)
            if name in pin.files:
                files[name] = sri_hash(content)
    return {"version": pin.version, "tarball": dist["tarball"], "integrity": dist["integrity"], "files": files}


def verify_integrity(content: bytes, integrity: str, pin: Pin) -> None:
    algorithm, _, expected = integrity.partition("-")
    if algorithm not in {"sha512", "sha384", "sha256"}:
        raise typer.BadParameter(f"{pin.folder}: unsupported integrity {algorithm}")
    actual = base64.b64encode(hashlib.new(algorithm, content).digest()).decode()
    if actual != expected:
        raise typer.BadParameter(f"{pin.folder}: the tarball does not match the registry's integrity hash")


def sri_hash(content: bytes) -> str:
    """The hash a browser checks in `integrity="…"` (Subresource Integrity)."""
    return "sha384-" + base64.b64encode(hashlib.sha384(content).digest()).decode()


def write_file(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


def remove_unpinned() -> None:
    pinned = {VENDOR_DIR / pin.folder for pin in PINS}
    for folder in _package_folders():
        if folder not in pinned:
            shutil.rmtree(folder)
    for scope in VENDOR_DIR.glob("@*"):
        if scope.is_dir() and not any(scope.iterdir()):
            scope.rmdir()


def _package_folders() -> list[Path]:
    """`name@version` folders, including scoped ones (`@scope/name@version`)."""
    if not VENDOR_DIR.exists():
        return []
    found: list[Path] = []
    for entry in VENDOR_DIR.iterdir():
        if entry.is_dir() and entry.name.startswith("@"):
            found.extend(child for child in entry.iterdir() if child.is_dir())
        elif entry.is_dir():
            found.append(entry)
    return found
