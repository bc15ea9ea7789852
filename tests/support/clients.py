"""The JavaScript clients of tests/clients: installed once per lockfile into a cache outside the
repository, copied with the code blocks of docs/clients.md into a folder of the test's, and run
with node, talking to the test one JSON object a line."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
CLIENTS = ROOT / "tests" / "clients"
CLIENTS_DOC = ROOT / "docs" / "clients.md"
INSTALLED = ".mediagraph-installed"
# A fenced block of docs/clients.md that the tests run: ```js file=name.js
DOC_BLOCK = re.compile(r"^```\w+ file=(?P<name>\S+)\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)


class NpmFailed(Exception):
    pass


def cache_root() -> Path:
    configured = os.environ.get("MEDIAGRAPH_CLIENTS_CACHE")
    if configured:
        return Path(configured)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "mediagraph" / "clients"


def install(root: Path) -> Path:
    """The folder holding node_modules for the pinned lockfile, installing it when missing."""
    manifest, lock = CLIENTS / "package.json", CLIENTS / "package-lock.json"
    digest = hashlib.sha256(manifest.read_bytes() + lock.read_bytes()).hexdigest()[:16]
    target = root / digest
    if (target / INSTALLED).exists():
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise NpmFailed("npm is not installed")
    root.mkdir(parents=True, exist_ok=True)
    # Installed beside the target and renamed into place: runs racing each other never see half a tree.
    staging = Path(tempfile.mkdtemp(dir=root, prefix="installing-"))
    try:
        shutil.copy(manifest, staging / "package.json")
        shutil.copy(lock, staging / "package-lock.json")
        result = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=staging,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        if result.returncode != 0:
            raise NpmFailed(result.stderr[-3000:])
        (staging / INSTALLED).write_text(digest)
        try:
            staging.rename(target)
        except OSError:
            if not (target / INSTALLED).exists():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def registry_reachable() -> bool:
    npm = shutil.which("npm")
    if npm is None:
        return False
    try:
        return subprocess.run([npm, "ping"], capture_output=True, timeout=60, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def doc_blocks() -> dict[str, str]:
    """The code blocks of docs/clients.md that name a file, by that name."""
    return {match["name"]: match["code"] for match in DOC_BLOCK.finditer(CLIENTS_DOC.read_text())}


def workspace(folder: Path, installed: Path, schema_sdl: str) -> Path:
    """A folder with the client scripts, the documentation's code, the schema and node_modules."""
    shutil.copytree(CLIENTS, folder, ignore=shutil.ignore_patterns("node_modules", "package-lock.json"))
    (folder / "node_modules").symlink_to(installed / "node_modules", target_is_directory=True)
    for name, code in doc_blocks().items():
        (folder / name).write_text(code)
    (folder / "schema.graphql").write_text(schema_sdl)
    (folder / "relay" / "schema.graphql").write_text(schema_sdl)
    (folder / "relay" / "src" / "__generated__").mkdir(exist_ok=True)
    return folder


def run_tool(folder: Path, *command: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """A tool from node_modules/.bin (relay-compiler, eslint, graphql-codegen) in `folder`."""
    binary = next(
        place / "node_modules" / ".bin" / command[0]
        for place in (folder, *folder.parents)
        if (place / "node_modules" / ".bin" / command[0]).exists()
    )
    return subprocess.run(
        [str(binary), *command[1:]], cwd=folder, capture_output=True, text=True, timeout=timeout, check=False
    )


class NodeScript:
    """A client script under node: reads what it says, answers what it asks."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, folder: Path, script: str, **env: str) -> NodeScript:
        node = shutil.which("node")
        assert node is not None
        process = await asyncio.create_subprocess_exec(
            node,
            script,
            cwd=folder,
            env={**os.environ, **env},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(process)

    async def said(self, timeout: float = 90) -> dict[str, Any]:  # noqa: ASYNC109 - a test helper's deadline
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        if not line:
            await self.process.wait()
            assert self.process.stderr is not None
            error = (await self.process.stderr.read()).decode()
            raise AssertionError(f"the script ended (exit {self.process.returncode}) without a word:\n{error}")
        return json.loads(line)  # type: ignore[no-any-return]

    async def answer(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        await self.process.stdin.drain()

    async def finished(self, timeout: float = 60) -> None:  # noqa: ASYNC109 - a test helper's deadline
        returncode = await asyncio.wait_for(self.process.wait(), timeout)
        assert self.process.stderr is not None
        error = (await self.process.stderr.read()).decode()
        assert returncode == 0, error

    def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
