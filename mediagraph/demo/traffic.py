"""Demo traffic: a steady trickle of activity through the public API, so live views have something to show.

Simulated people view, like (now and then unlike), comment and reply, post, upload a
new media from time to time, and gain points on the demo board; players send playback
heartbeats every 5 s for a few minutes each. Every action is a GraphQL operation, as a
client would send it. Media differ in appeal (a long-tailed draw), so a few draw most
of the attention and today's hot list has a clear top that still moves. It runs until
stopped, saying what it did in one line every half minute.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx

from mediagraph import security
from mediagraph.db.comments import MAX_DEPTH
from mediagraph.demo import (
    COMMENT,
    DEMO_BOARD,
    DEMO_PASSWORD,
    LIKE,
    PLAY,
    POST,
    REMARKS,
    TAGS,
    VIEW,
    WORDS,
    DemoClient,
    DemoError,
    in_process_client,
    png_image,
)
from mediagraph.settings import Settings

log = logging.getLogger(__name__)

LOGIN = "mutation($u: String!, $p: String!) { login(username: $u, password: $p) { token user { id } } }"
NEWEST = "query { mediaList(sort: NEWEST, first: 100) { edges { node { id } } } }"
UNLIKE = "mutation($id: ID!) { unlikeMedia(mediaId: $id) { id } }"
SCORE = "mutation($b: String!, $u: ID!, $s: Float!) { submitScore(leaderboard: $b, userId: $u, score: $s) { changed } }"

HEARTBEAT_SECONDS = 5.0
# A server restarting refuses connections for a while: wait, then carry on.
UNREACHABLE_PAUSE_SECONDS = 2.0
STOP_GRACE_SECONDS = 30.0


@dataclass(frozen=True)
class TrafficOptions:
    actions_per_second: float = 4.0
    players: int = 6
    report_every_seconds: float = 30.0


@dataclass
class Audience:
    """Who acts and on what: the demo accounts, and media with their appeal."""

    accounts: list[tuple[str, str]]  # (token, user id)
    media: list[str]
    appeal: list[float]
    board: str = DEMO_BOARD
    # The latest comment this traffic wrote on each media, and how deep it is (a top-level one: 1).
    last_comment: dict[str, tuple[str, int]] = field(default_factory=dict)

    def add_media(self, media_id: str, rng: random.Random) -> None:
        self.media.append(media_id)
        self.appeal.append(rng.paretovariate(1.2))

    def pick_media(self, rng: random.Random) -> str:
        return rng.choices(self.media, weights=self.appeal)[0]

    def pick_account(self, rng: random.Random) -> tuple[str, str]:
        return rng.choice(self.accounts)


async def find_audience(client: DemoClient, users: int, rng: random.Random) -> Audience:
    """Log the demo users in and find the newest media to act on."""
    accounts = []
    for n in range(users):
        try:
            data = await client.run(LOGIN, {"u": f"demo_{n}", "p": DEMO_PASSWORD})
        except DemoError:
            break
        accounts.append((data["login"]["token"], data["login"]["user"]["id"]))
    if not accounts:
        raise DemoError([{"message": "no demo users: load the demo data first"}])
    audience = Audience(accounts=accounts, media=[], appeal=[])
    for edge in (await client.run(NEWEST, {}))["mediaList"]["edges"]:
        audience.add_media(edge["node"]["id"], rng)
    return audience


class Traffic:
    def __init__(
        self, client: DemoClient, settings: Settings, options: TrafficOptions, audience: Audience, rng: random.Random
    ) -> None:
        self.client = client
        self.options = options
        self.audience = audience
        self.rng = rng
        self.service_token = security.issue_token(settings, user_id=1, role=security.SERVICE_ROLE, token_version=0)
        self.done: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.actions: list[tuple[str, int, Callable[[], Awaitable[None]]]] = [
            ("views", 50, self.view),
            ("likes", 14, self.like),
            ("unlikes", 3, self.unlike),
            ("comments", 10, self.comment),
            ("posts", 5, self.post),
            ("scores", 12, self.score),
            ("uploads", 1, self.upload),
        ]

    async def run(self, stopped: asyncio.Event) -> None:
        if not self.audience.media:
            await self.upload()
        tasks = [
            asyncio.create_task(self._act(stopped)),
            asyncio.create_task(self._report(stopped)),
            *(asyncio.create_task(self._player(stopped)) for _ in range(self.options.players)),
        ]
        try:
            await stopped.wait()
            # Each loop ends after the operation it is sending, so every action counted happened.
            await asyncio.wait(tasks, timeout=STOP_GRACE_SECONDS)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _act(self, stopped: asyncio.Event) -> None:
        names = [name for name, _, _ in self.actions]
        weights = [weight for _, weight, _ in self.actions]
        perform = {name: action for name, _, action in self.actions}
        while not stopped.is_set():
            name = self.rng.choices(names, weights=weights)[0]
            await self._attempt(name, perform[name])
            await _sleep_unless(stopped, self.rng.expovariate(self.options.actions_per_second))

    async def _attempt(self, name: str, action: Callable[[], Awaitable[None]]) -> None:
        try:
            await action()
            self.done[name] += 1
        except DemoError as error:
            self.refused.update(error.codes)
        except (httpx.HTTPError, ValueError):
            self.refused["UNREACHABLE"] += 1
            await asyncio.sleep(UNREACHABLE_PAUSE_SECONDS)

    async def _player(self, stopped: asyncio.Event) -> None:
        """One viewer after another watching a media for half a minute to a few minutes."""
        # Players start spread over a heartbeat period, as real ones would.
        await _sleep_unless(stopped, self.rng.uniform(0, HEARTBEAT_SECONDS))
        while not stopped.is_set():
            session, media_id = str(uuid.uuid4()), self.audience.pick_media(self.rng)
            ends = time.monotonic() + self.rng.uniform(30, 300)
            while not stopped.is_set() and time.monotonic() < ends:
                await self._attempt("heartbeats", functools.partial(self.heartbeat, session, media_id))
                await _sleep_unless(stopped, HEARTBEAT_SECONDS)

    async def _report(self, stopped: asyncio.Event) -> None:
        """One line per period: what was done (the counters only grow), and what was refused."""
        reported_done, reported_refused = Counter[str](), Counter[str]()
        while not stopped.is_set():
            since = time.monotonic()
            await _sleep_unless(stopped, self.options.report_every_seconds)
            done, refused = self.done - reported_done, self.refused - reported_refused
            reported_done, reported_refused = self.done.copy(), self.refused.copy()
            if done or refused:
                log.info(
                    "demo traffic, last %.0fs: %s%s",
                    time.monotonic() - since,
                    ", ".join(f"{count} {name}" for name, count in done.most_common()) or "nothing",
                    "; refused: " + ", ".join(f"{count} {code}" for code, count in refused.most_common())
                    if refused
                    else "",
                )

    async def view(self) -> None:
        # Mostly anonymous viewers, each its own user agent, so each view counts once.
        media_id = self.audience.pick_media(self.rng)
        agent = f"demo-viewer-{self.rng.getrandbits(48):012x}"
        await self.client.run(VIEW, {"id": media_id}, headers={"user-agent": agent})

    async def like(self) -> None:
        token, _ = self.audience.pick_account(self.rng)
        await self.client.run(LIKE, {"id": self.audience.pick_media(self.rng)}, token=token)

    async def unlike(self) -> None:
        token, _ = self.audience.pick_account(self.rng)
        await self.client.run(UNLIKE, {"id": self.rng.choice(self.audience.media)}, token=token)

    async def comment(self) -> None:
        token, _ = self.audience.pick_account(self.rng)
        media_id = self.audience.pick_media(self.rng)
        wants_reply = self.rng.random() < 0.4
        last = self.audience.last_comment.get(media_id)
        # A reply goes under the latest comment while the thread may nest deeper; past the
        # limit the server refuses it, so a new thread starts instead.
        parent, depth = last if wants_reply and last is not None and last[1] < MAX_DEPTH else (None, 0)
        created = await self.client.run(
            COMMENT, {"media": media_id, "text": self.rng.choice(REMARKS), "parent": parent}, token=token
        )
        self.audience.last_comment[media_id] = (created["createComment"]["id"], depth + 1)

    async def post(self) -> None:
        token, _ = self.audience.pick_account(self.rng)
        attached = self.audience.pick_media(self.rng) if self.rng.random() < 0.5 else None
        text = f"{self.rng.choice(WORDS).title()} {self.rng.choice(WORDS)}, again."
        await self.client.run(POST, {"text": text, "media": attached}, token=token)

    async def score(self) -> None:
        _, user_id = self.audience.pick_account(self.rng)
        variables = {"b": self.audience.board, "u": user_id, "s": self.rng.randint(1, 25)}
        await self.client.run(SCORE, variables, token=self.service_token)

    async def upload(self) -> None:
        # Today's hot list ranks media uploaded today: new uploads keep it filled day after day.
        token, _ = self.audience.pick_account(self.rng)
        rgb = (self.rng.randrange(256), self.rng.randrange(256), self.rng.randrange(256))
        title = f"{self.rng.choice(WORDS).title()} {self.rng.choice(WORDS)}"
        tags = self.rng.sample(TAGS, self.rng.randint(1, 3))
        media_id = await self.client.upload(token=token, title=title, tags=tags, image=png_image(64, 36, rgb))
        self.audience.add_media(media_id, self.rng)

    async def heartbeat(self, session: str, media_id: str) -> None:
        await self.client.run(PLAY, {"session": session, "media": media_id})


async def _sleep_unless(stopped: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopped.wait(), seconds)


async def run_traffic(
    client: DemoClient, settings: Settings, options: TrafficOptions, *, users: int, stopped: asyncio.Event
) -> None:
    rng = random.Random()
    audience = await find_audience(client, users, rng)
    log.info(
        "demo traffic: about %s actions a second and %d players over %d media; Ctrl-C stops it",
        options.actions_per_second,
        options.players,
        len(audience.media),
    )
    await Traffic(client, settings, options, audience, rng).run(stopped)


async def run_in_process(settings: Settings, options: TrafficOptions, *, users: int, stopped: asyncio.Event) -> None:
    """Traffic through an in-process copy of the app: pushes reach any server on the same stores."""
    async with in_process_client(settings) as client:
        await run_traffic(client, settings, options, users=users, stopped=stopped)


async def run_over_http(
    base_url: str, settings: Settings, options: TrafficOptions, *, users: int, stopped: asyncio.Event
) -> None:
    """Traffic sent to a running server, once it answers /readyz."""
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        while not stopped.is_set():
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get("/readyz")).status_code == 200:
                    break
            await _sleep_unless(stopped, 0.5)
        if not stopped.is_set():
            await run_traffic(DemoClient(http), settings, options, users=users, stopped=stopped)


class TrafficThread(threading.Thread):
    """`serve --traffic`: traffic on its own thread and event loop, beside the server in the main thread."""

    def __init__(self, base_url: str, settings: Settings, options: TrafficOptions, *, users: int) -> None:
        super().__init__(name="demo-traffic", daemon=True)
        self.arguments = (base_url, settings, options, users)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopped: asyncio.Event | None = None
        self.ready = threading.Event()

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self.loop, self.stopped = asyncio.get_running_loop(), asyncio.Event()
        self.ready.set()
        base_url, settings, options, users = self.arguments
        try:
            await run_over_http(base_url, settings, options, users=users, stopped=self.stopped)
        except Exception:
            log.exception("demo traffic stopped")

    def stop(self) -> None:
        self.ready.wait(timeout=10)
        if self.loop is not None and self.stopped is not None and self.is_alive():
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.stopped.set)
        self.join(timeout=10)
