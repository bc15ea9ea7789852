"""Sample data for a newcomer's first look, made through the public API as clients would.

Everything goes through GraphQL on an in-process copy of the app, so the demo exercises
the same validation, counters, shards, caches and events as real traffic: users follow
each other and post, comment in threads, like, view and play media, and climb a board.
"""

from __future__ import annotations

import contextlib
import json
import random
import struct
import uuid
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from rich.progress import Progress

from mediagraph import security
from mediagraph.settings import Settings

DEMO_PASSWORD = "demo-password"
DEMO_BOARD = "demo-points"
TAGS = ["music", "travel", "cats", "cooking", "games", "news", "art", "science", "sports", "live"]
WORDS = ["sunset", "river", "night", "city", "market", "storm", "garden", "harbor", "forest", "rooftop"]
REMARKS = ["Lovely!", "Where is this?", "Again please", "The colours!", "Saved it", "Ha, agreed", "Same here"]

REGISTER = "mutation($u: String!, $p: String!, $n: String) { register(username: $u, password: $p, nickname: $n) { token user { id } } }"
LOGIN = "mutation($u: String!, $p: String!) { login(username: $u, password: $p) { token } }"
UPLOAD = "mutation($file: Upload!, $title: String!, $tags: [String!]) { uploadMedia(file: $file, title: $title, tags: $tags) { id } }"
FOLLOW = "mutation($id: ID!) { follow(userId: $id) { id } }"
POST = "mutation($text: String!, $media: ID) { createPost(text: $text, mediaId: $media) { id } }"
COMMENT = "mutation($media: ID!, $text: String!, $parent: ID) { createComment(mediaId: $media, content: $text, parentId: $parent) { id } }"
LIKE = "mutation($id: ID!) { likeMedia(mediaId: $id) { id } }"
VIEW = "mutation($id: ID!) { recordView(mediaId: $id) { counted } }"
PLAY = "mutation($session: UUID!, $media: ID!) { reportPlayback(sessionId: $session, mediaId: $media) { concurrent } }"
DEFINE_BOARD = "mutation($name: String!) { defineLeaderboard(name: $name, operator: INCREMENT) { id } }"
SUBMIT = "mutation($name: String!, $scores: [ScoreInput!]!) { submitScores(leaderboard: $name, scores: $scores) { changed } }"


def png_image(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A real PNG: a gradient from `rgb`, so browsers and players can show it."""
    rows = b"".join(
        b"\x00" + bytes(channel for x in range(width) for channel in ((rgb[0] + x) % 256, (rgb[1] + y) % 256, rgb[2]))
        for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


class DemoError(RuntimeError):
    """An operation of the demo was refused; the message carries the GraphQL errors."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(json.dumps(errors)[:500])
        self.codes = [str((error.get("extensions") or {}).get("code", "INTERNAL")) for error in errors]


@dataclass
class DemoClient:
    http: httpx.AsyncClient
    tokens: dict[str, str] = field(default_factory=dict)

    async def run(
        self, query: str, variables: dict[str, Any], *, token: str | None = None, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        headers = {**(headers or {}), **({"authorization": f"Bearer {token}"} if token else {})}
        body = (await self.http.post("/graphql", json={"query": query, "variables": variables}, headers=headers)).json()
        if body.get("errors"):
            raise DemoError(body["errors"])
        return body["data"]  # type: ignore[no-any-return]

    async def upload(self, *, token: str, title: str, tags: list[str], image: bytes) -> str:
        operations = {"query": UPLOAD, "variables": {"file": None, "title": title, "tags": tags}}
        response = await self.http.post(
            "/graphql",
            headers={"authorization": f"Bearer {token}"},
            data={"operations": json.dumps(operations), "map": json.dumps({"0": ["variables.file"]})},
            files={"0": ("demo.png", image, "image/png")},
        )
        body = response.json()
        if body.get("errors"):
            raise DemoError(body["errors"])
        return body["data"]["uploadMedia"]["id"]  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def in_process_client(settings: Settings) -> AsyncIterator[DemoClient]:
    from mediagraph.app import create_app

    app = create_app(settings.model_copy(update={"run_workers": False}))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 0))
        async with httpx.AsyncClient(transport=transport, base_url="http://demo.local", timeout=60) as http:
            yield DemoClient(http)


async def load_demo(settings: Settings, *, users: int, media: int, seed: int = 7) -> bool:
    """Load the sample data; returns False when it was already there (a second start reuses it)."""
    rng = random.Random(seed)
    async with in_process_client(settings) as client:
        if await _already_loaded(client):
            return False
        steps = users + media + users * 2 + media * 4 + 2
        with Progress() as progress:
            task = progress.add_task("demo data", total=steps)
            accounts = await _register(client, users, lambda: progress.advance(task))
            uploads = await _upload(client, rng, accounts, media, lambda: progress.advance(task))
            await _socialise(client, rng, accounts, uploads, lambda: progress.advance(task))
            await _engage(client, rng, accounts, uploads, lambda: progress.advance(task))
            await _board(client, settings, rng, accounts, lambda: progress.advance(task))
    return True


async def _already_loaded(client: DemoClient) -> bool:
    try:
        await client.run(LOGIN, {"u": "demo_0", "p": DEMO_PASSWORD})
    except DemoError:
        return False
    return True


Account = tuple[str, str]  # (token, global user id)
Advance = Callable[[], None]


async def _register(client: DemoClient, count: int, advance: Advance) -> list[Account]:
    accounts = []
    for n in range(count):
        data = await client.run(REGISTER, {"u": f"demo_{n}", "p": DEMO_PASSWORD, "n": f"Demo {n}"})
        accounts.append((data["register"]["token"], data["register"]["user"]["id"]))
        advance()
    return accounts


async def _upload(
    client: DemoClient, rng: random.Random, accounts: list[Account], count: int, advance: Advance
) -> list[str]:
    uploads = []
    for _ in range(count):
        token, _ = rng.choice(accounts)
        image = png_image(64, 36, (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
        title = f"{rng.choice(WORDS).title()} {rng.choice(WORDS)}"
        uploads.append(
            await client.upload(token=token, title=title, tags=rng.sample(TAGS, rng.randint(1, 3)), image=image)
        )
        advance()
    return uploads


async def _socialise(
    client: DemoClient, rng: random.Random, accounts: list[Account], uploads: list[str], advance: Advance
) -> None:
    """Follows and posts, so news feeds have something in them."""
    for token, user_id in accounts:
        for _, other in rng.sample(accounts, min(3, len(accounts))):
            if other != user_id:
                await client.run(FOLLOW, {"id": other}, token=token)
        advance()
    for token, _ in accounts:
        for _ in range(2):
            attached = rng.choice(uploads) if uploads and rng.random() < 0.5 else None
            await client.run(POST, {"text": f"{rng.choice(WORDS).title()} today.", "media": attached}, token=token)
        advance()


async def _engage(
    client: DemoClient, rng: random.Random, accounts: list[Account], uploads: list[str], advance: Advance
) -> None:
    """Comment threads, likes, views and plays, spread unevenly so the sorts and hot media differ."""
    for media_id in uploads:
        fans = rng.sample(accounts, rng.randint(1, len(accounts)))
        parent = None
        for token, _ in fans[:3]:
            created = await client.run(
                COMMENT, {"media": media_id, "text": rng.choice(REMARKS), "parent": parent}, token=token
            )
            parent = parent or created["createComment"]["id"]
        advance()
        for token, _ in fans:
            await client.run(LIKE, {"id": media_id}, token=token)
        advance()
        for token, _ in fans:
            await client.run(VIEW, {"id": media_id}, token=token)
        advance()
        await client.run(PLAY, {"session": str(uuid.uuid4()), "media": media_id})
        advance()


async def _board(
    client: DemoClient, settings: Settings, rng: random.Random, accounts: list[Account], advance: Advance
) -> None:
    service = security.issue_token(settings, user_id=1, role=security.SERVICE_ROLE, token_version=0)
    await client.run(DEFINE_BOARD, {"name": DEMO_BOARD}, token=service)
    advance()
    scores = [{"userId": user_id, "score": rng.randint(1, 1000)} for _, user_id in accounts]
    await client.run(SUBMIT, {"name": DEMO_BOARD, "scores": scores[:100]}, token=service)
    advance()
