"""The hot writes `bench http` measures on mediagraph alone, each as wrk Lua that varies every request.

- recordView: logged-in users (one token each) viewing media picked at random, so
  nearly every view is a new (viewer, media) pair and is counted.
- likeMedia / unlikeMedia: each wrk thread likes a random (user, media) pair and,
  `LIKE_LAG` requests later, takes that like back; steady state alternates likes and
  unlikes, and at most `LIKE_LAG` likes per thread remain when the run stops. The
  likers are users who hold none of the loaded likes, so every call changes a row.
- reportPlayback: each thread keeps `PLAYBACK_SESSIONS` players playing; a player
  heartbeats in turn and, after `PLAYBACK_BEATS` heartbeats (five minutes of 5 s
  heartbeats), starts a new session on another media. The players are already playing
  when the first run begins (`start_players` sends each one's first heartbeat), and every
  run takes them up where they are, at different points of their plays: a run measures
  heartbeats as a steady audience sends them, one in `PLAYBACK_BEATS` starting a session,
  not an audience that all pressed play at the run's first second.
- submitScore (service token): random scores for entrants drawn from every user, on
  a BEST board the benchmark defines.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks.wrk import THREADS, Load, lua_string, write_lines
from mediagraph import security
from mediagraph.ids import to_global_id
from mediagraph.settings import Settings

RECORD_VIEW = "mutation($m: ID!) { recordView(mediaId: $m) { counted media { id } } }"
LIKE = "mutation($m: ID!) { likeMedia(mediaId: $m) { id } }"
UNLIKE = "mutation($m: ID!) { unlikeMedia(mediaId: $m) { id } }"
REPORT_PLAYBACK = "mutation($s: UUID!, $m: ID!) { reportPlayback(sessionId: $s, mediaId: $m) { counted concurrent } }"
SUBMIT_SCORE = (
    "mutation($b: String!, $u: ID!, $s: Float!) { submitScore(leaderboard: $b, userId: $u, score: $s) { changed } }"
)
DEFINE_BOARD = "mutation($n: String!) { defineLeaderboard(name: $n, operator: BEST) { id } }"

RECORD_VIEW_KEY = "record-view"
LIKE_KEY = "like-unlike"
REPORT_PLAYBACK_KEY = "report-playback"
SUBMIT_SCORE_KEY = "submit-score"
KEYS = (RECORD_VIEW_KEY, LIKE_KEY, REPORT_PLAYBACK_KEY, SUBMIT_SCORE_KEY)

# Likes wait this many of their thread's requests before being taken back: far more
# than a thread has in flight, so the like has been answered by then.
LIKE_LAG = 256
PLAYBACK_SESSIONS = 5_000
PLAYBACK_BEATS = 60
BOARD = "bench-http"
HIGHEST_SCORE = 1_000_000

# Placeholders in a request body, replaced by Lua concatenation.
MEDIA = "@MEDIA@"
SESSION = "@SESSION@"
USER = "@USER@"
SCORE = 1234567.5


def body_parts(query: str, variables: dict[str, object], *placeholders: str) -> list[str]:
    """The JSON body split around `placeholders` (string values, or the score number), in order."""
    text = json.dumps({"query": query, "variables": variables}, separators=(",", ":"))
    parts: list[str] = []
    for placeholder in placeholders:
        head, found, text = text.partition(placeholder)
        if not found:
            raise ValueError(f"{placeholder} is not in the body")
        parts.append(head)
    parts.append(text)
    return parts


def filled(parts: list[str], *values: str) -> str:
    """A body as the Lua builds it: the parts with the values between them."""
    return parts[0] + "".join(value + part for value, part in zip(values, parts[1:], strict=True))


def lua_parts(name: str, parts: list[str]) -> str:
    return f"{name} = {{{', '.join(lua_string(part) for part in parts)}}}\n"


RECORD_VIEW_BODY = body_parts(RECORD_VIEW, {"m": MEDIA}, MEDIA)
LIKE_BODY = body_parts(LIKE, {"m": MEDIA}, MEDIA)
UNLIKE_BODY = body_parts(UNLIKE, {"m": MEDIA}, MEDIA)
REPORT_PLAYBACK_BODY = body_parts(REPORT_PLAYBACK, {"s": SESSION, "m": MEDIA}, SESSION, MEDIA)
SUBMIT_SCORE_BODY = body_parts(SUBMIT_SCORE, {"b": BOARD, "u": USER, "s": SCORE}, USER, str(SCORE))


RECORD_VIEW_LUA = (
    lua_parts("BODY", RECORD_VIEW_BODY)
    + r"""
function init(args)
  seed_random()
  media = read_lines(args[1])
  tokens = read_lines(args[2])
end

function request()
  local body = BODY[1] .. media[math.random(#media)] .. BODY[2]
  return wrk.format("POST", nil, bearer_headers(tokens[math.random(#tokens)]), body)
end
"""
)

LIKE_LUA = (
    lua_parts("LIKE", LIKE_BODY)
    + lua_parts("UNLIKE", UNLIKE_BODY)
    + f"LAG = {LIKE_LAG}\n"
    + r"""
function init(args)
  seed_random()
  media = read_lines(args[1])
  tokens = read_lines(args[2])
  -- Likes waiting to be taken back, oldest first: a ring of LAG slots.
  pending_media, pending_tokens = {}, {}
  first, count = 1, 0
end

function request()
  if count >= LAG then
    local m, t = pending_media[first], pending_tokens[first]
    first = first % LAG + 1
    count = count - 1
    return wrk.format("POST", nil, bearer_headers(t), UNLIKE[1] .. m .. UNLIKE[2])
  end
  local m, t = media[math.random(#media)], tokens[math.random(#tokens)]
  local slot = (first + count - 1) % LAG + 1
  pending_media[slot], pending_tokens[slot] = m, t
  count = count + 1
  return wrk.format("POST", nil, bearer_headers(t), LIKE[1] .. m .. LIKE[2])
end
"""
)

REPORT_PLAYBACK_LUA = (
    lua_parts("BODY", REPORT_PLAYBACK_BODY)
    + f"SESSIONS = {PLAYBACK_SESSIONS}\nBEATS = {PLAYBACK_BEATS}\n"
    + r"""
function new_uuid()
  local r = math.random
  return string.format("%04x%04x-%04x-4%03x-%04x-%04x%04x%04x",
    r(0, 65535), r(0, 65535), r(0, 65535), r(0, 4095), 32768 + r(0, 16383), r(0, 65535), r(0, 65535), r(0, 65535))
end

-- args[2]: the players already playing, one "session media beats" line each, SESSIONS per thread.
function init(args)
  seed_random()
  media = read_lines(args[1])
  sessions, session_media, beats = {}, {}, {}
  local players = read_lines(args[2])
  for n = 1, SESSIONS do
    local session, played, beaten = string.match(players[(thread_number - 1) * SESSIONS + n], "^(%S+) (%S+) (%d+)$")
    sessions[n], session_media[n], beats[n] = session, played, tonumber(beaten)
  end
  turn = 0
end

function request()
  turn = turn % SESSIONS + 1
  if beats[turn] >= BEATS then
    sessions[turn], session_media[turn], beats[turn] = new_uuid(), media[math.random(#media)], 0
  end
  beats[turn] = beats[turn] + 1
  local body = BODY[1] .. sessions[turn] .. BODY[2] .. session_media[turn] .. BODY[3]
  return wrk.format("POST", nil, JSON_HEADERS, body)
end
"""
)

SUBMIT_SCORE_LUA = (
    lua_parts("BODY", SUBMIT_SCORE_BODY)
    + f"HIGHEST = {HIGHEST_SCORE}\n"
    + r"""
function init(args)
  seed_random()
  users = read_lines(args[1])
  headers = bearer_headers(read_lines(args[2])[1])
end

function request()
  local body = BODY[1] .. users[math.random(#users)] .. BODY[2] .. math.random(HIGHEST) .. BODY[3]
  return wrk.format("POST", nil, headers, body)
end
"""
)


@dataclass(frozen=True)
class WriteData:
    """The files the write loads read: media and user global ids, user tokens, a service token."""

    media: Path
    players: Path
    viewer_tokens: Path
    liker_tokens: Path
    users: Path
    service_token: Path


def write_data(
    folder: Path, settings: Settings, *, media_ids: list[int], user_ids: list[int], likers: list[int]
) -> WriteData:
    def tokens(ids: list[int]) -> list[str]:
        return [security.issue_token(settings, user_id=user_id, role="user", token_version=0) for user_id in ids]

    service = security.issue_token(settings, user_id=user_ids[0], role=security.SERVICE_ROLE, token_version=0)
    return WriteData(
        media=write_lines(folder / "write-media.txt", [to_global_id("Media", id_) for id_ in media_ids]),
        players=write_lines(folder / "write-players.txt", players(media_ids, random.Random(len(media_ids)))),
        viewer_tokens=write_lines(folder / "write-viewer-tokens.txt", tokens(user_ids)),
        liker_tokens=write_lines(folder / "write-liker-tokens.txt", tokens(likers)),
        users=write_lines(folder / "write-users.txt", [to_global_id("User", id_) for id_ in user_ids]),
        service_token=write_lines(folder / "write-service-token.txt", [service]),
    )


def players(media_ids: list[int], rng: random.Random, *, per_thread: int = PLAYBACK_SESSIONS) -> list[str]:
    """`per_thread` players for each wrk thread, each "session media beats": a session on a
    random media, `beats` heartbeats into its play (players are at different points of theirs)."""
    return [
        f"{uuid.UUID(int=rng.getrandbits(128), version=4)} {to_global_id('Media', rng.choice(media_ids))} "
        f"{rng.randrange(PLAYBACK_BEATS)}"
        for _ in range(per_thread * THREADS)
    ]


def start_players(url: str, players: Path) -> None:
    """Each player's first heartbeat, so the runs find them playing."""

    lines = players.read_text().splitlines()

    async def start() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            await first_heartbeats(client, url, lines)

    asyncio.run(start())


async def first_heartbeats(client: httpx.AsyncClient, url: str, lines: list[str], *, concurrency: int = 64) -> None:
    waiting = iter(lines)

    async def player() -> None:
        for line in waiting:
            session, media, _ = line.split(" ")
            body = filled(REPORT_PLAYBACK_BODY, session, media)
            response = await client.post(url, content=body.encode(), headers={"content-type": "application/json"})
            answer = response.json()
            if answer.get("errors"):
                raise RuntimeError(f"starting a player failed: {answer['errors']}")

    await asyncio.gather(*(player() for _ in range(concurrency)))


def define_board(url: str, service_token: str) -> None:
    """The board submitScore writes to (BEST: a user's highest score counts)."""
    response = httpx.post(
        url,
        json={"query": DEFINE_BOARD, "variables": {"n": BOARD}},
        headers={"authorization": f"Bearer {service_token}"},
        timeout=30,
    )
    body = response.json()
    if body.get("errors"):
        raise RuntimeError(f"defining the leaderboard failed: {body['errors']}")


def loads(data: WriteData) -> dict[str, Load]:
    """Each write workload's load, by workload key."""
    return {
        RECORD_VIEW_KEY: Load(RECORD_VIEW_LUA, (data.media, data.viewer_tokens)),
        LIKE_KEY: Load(LIKE_LUA, (data.media, data.liker_tokens)),
        REPORT_PLAYBACK_KEY: Load(
            REPORT_PLAYBACK_LUA, (data.media, data.players), start=lambda url: start_players(url, data.players)
        ),
        SUBMIT_SCORE_KEY: Load(SUBMIT_SCORE_LUA, (data.users, data.service_token)),
    }


def sample_bodies(key: str, *, media_id: str, user_id: str) -> list[str]:
    """The bodies a write's Lua sends, built from the same parts, with these global ids; for checking them."""
    session = str(uuid.uuid4())
    samples = {
        RECORD_VIEW_KEY: [filled(RECORD_VIEW_BODY, media_id)],
        LIKE_KEY: [filled(LIKE_BODY, media_id), filled(UNLIKE_BODY, media_id)],
        REPORT_PLAYBACK_KEY: [filled(REPORT_PLAYBACK_BODY, session, media_id)],
        SUBMIT_SCORE_KEY: [filled(SUBMIT_SCORE_BODY, user_id, "42")],
    }
    return samples[key]
