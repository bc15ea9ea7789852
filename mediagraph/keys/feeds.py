"""Every Redis key of the feeds domain, and the one object that keeps the feed caches' rules.

Like Mastodon's FeedManager, `FeedCache` is the only code that writes a cached feed;
everything else asks it. Two kinds of feed are cached, both as sorted sets:

- `feed:{author}`: an author's newest posts (TTL renewed on every write);
- `newsfeed:{user}`: posts of the users someone follows (TTL renewed on every read).

Layout. A score is a double and cannot hold a 64-bit snowflake exactly, so every member
scores 0 and the set sorts lexically: a post is `<id, 19 digits>:<author id>`, so lexical
order is id order and a keyset bound is an exact `ZREVRANGEBYLEX` bound.

Coverage, the invariant that lets paging cross from Redis into PostgreSQL without gaps or
duplicates: a ready feed holds every post of its timeline from its lowest entry upwards.
The lowest entry may be a floor marker `<id, 19 digits>` (no author) that says "complete
down to this id"; id 0 says "nothing older exists". Everything below the lowest entry is
PostgreSQL's. Each write below keeps the invariant:

- a post that would become the lowest entry is refused: it would sit below a gap;
- trimming to the bounded size drops the lowest entries first;
- a build marks the key `~pending` before it reads PostgreSQL, so posts written meanwhile
  land in it, and readers treat a pending key as absent until the build finishes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from mediagraph.keys import KeySpace
from mediagraph.lua import Lua, run_pipeline

PENDING = "~pending"
ID_DIGITS = 19
COMPLETE = 0
# Long enough for a fan-in over thousands of followees; short enough that a builder
# that died mid-way leaves nothing behind for long.
BUILD_TTL_MS = 30_000

FANOUT_GROUP = "fanout"


def author_feed(keys: KeySpace, author_id: int) -> str:
    return keys.key("feed", f"{{{author_id}}}")


def newsfeed(keys: KeySpace, user_id: int) -> str:
    return keys.key("newsfeed", f"{{{user_id}}}")


def fanout_stream(keys: KeySpace) -> str:
    return keys.key("feeds", "{fanout}")


def fanout_dead_letters(keys: KeySpace) -> str:
    return keys.key("feeds", "{fanout}", "dead")


def newsfeed_channel(keys: KeySpace, user_id: int) -> str:
    """New posts in one user's news feed, and notice that the user's follows changed."""
    return keys.entity_channel("newsfeed", user_id)


def author_posts_channel(keys: KeySpace, author_id: int) -> str:
    """New posts of one author; celebrities' followers listen here, as they get no fan-out."""
    return keys.entity_channel("posts", author_id)


def post_member(post_id: int, author_id: int) -> str:
    return f"{post_id:0{ID_DIGITS}d}:{author_id}"


def floor_marker(floor_id: int) -> str:
    return f"{floor_id:0{ID_DIGITS}d}"


@dataclass(frozen=True)
class Entry:
    post_id: int
    author_id: int | None  # None for a floor marker

    @property
    def member(self) -> str:
        return floor_marker(self.post_id) if self.author_id is None else post_member(self.post_id, self.author_id)

    @classmethod
    def parse(cls, raw: bytes | str) -> Entry:
        text = raw.decode() if isinstance(raw, bytes) else raw
        post, _, author = text.partition(":")
        return cls(int(post), int(author) if author else None)


class CacheState(Enum):
    MISSING = 0
    BUILDING = 1
    READY = 2


@dataclass
class Window:
    """Entries of a feed below a bound, newest first, up to its floor."""

    state: CacheState
    posts: list[Entry]
    # Set when the read reached the feed's floor: every post at or above it was in the feed.
    floor: int | None = None
    # The feed's lowest entry overall (its floor when it has no marker).
    lowest: Entry | None = None


def _window(reply: list[Any]) -> Window:
    state = CacheState(int(reply[0]))
    if state is not CacheState.READY:
        return Window(state, [])
    window = Window(state, [], lowest=Entry.parse(reply[2][0]) if reply[2] else None)
    for raw in reply[1]:
        entry = Entry.parse(raw)
        if entry.author_id is None:
            window.floor = entry.post_id
            break
        window.posts.append(entry)
    return window


_READ = f"""
if redis.call('EXISTS', KEYS[1]) == 0 then return {{0}} end
if redis.call('ZSCORE', KEYS[1], '{PENDING}') then return {{1}} end
if tonumber(ARGV[4]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
local entries = redis.call('ZREVRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
return {{2, entries, redis.call('ZRANGE', KEYS[1], 0, 0)}}
"""

# The seed's EXISTS-then-ZADD: a user without a cached feed does not get one from a write.
_ADD = f"""
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local pending = redis.call('ZSCORE', KEYS[1], '{PENDING}')
local landed = 0
for i = 3, #ARGV do
  if not redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 0, ARGV[i])
    if redis.call('ZRANK', KEYS[1], ARGV[i]) == 0 then
      redis.call('ZREM', KEYS[1], ARGV[i])
    else
      landed = landed + 1
    end
  end
end
if not pending then
  local excess = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[1])
  if excess > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, excess - 1) end
  if tonumber(ARGV[2]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
end
return landed
"""

_BEGIN_BUILD = f"""
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('ZADD', KEYS[1], 0, '{PENDING}', 0, '{floor_marker(COMPLETE)}')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"""

_FILL = f"""
if not redis.call('ZSCORE', KEYS[1], '{PENDING}') then return 0 end
for i = 1, #ARGV do redis.call('ZADD', KEYS[1], 0, ARGV[i]) end
return 1
"""

_FINISH_BUILD = f"""
if not redis.call('ZSCORE', KEYS[1], '{PENDING}') then return 0 end
redis.call('ZREM', KEYS[1], '{PENDING}')
redis.call('ZREMRANGEBYLEX', KEYS[1], '-', '(' .. ARGV[1])
redis.call('ZADD', KEYS[1], 0, ARGV[1])
local excess = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[2])
if excess > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, excess - 1) end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

_REMOVE_AUTHOR = """
local suffix = ARGV[1]
local removed = 0
for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if string.sub(member, -#suffix) == suffix then
    redis.call('ZREM', KEYS[1], member)
    removed = removed + 1
  end
end
return removed
"""

# Only ever raises the floor: a marker below the lowest entry would claim coverage it lacks.
_RAISE_FLOOR = f"""
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('ZSCORE', KEYS[1], '{PENDING}') then return 0 end
if redis.call('ZLEXCOUNT', KEYS[1], '-', '(' .. ARGV[1]) == 0 then return 0 end
redis.call('ZREMRANGEBYLEX', KEYS[1], '-', '(' .. ARGV[1])
redis.call('ZADD', KEYS[1], 0, ARGV[1])
return 1
"""

READ_SCRIPT = Lua(_READ)
ADD_SCRIPT = Lua(_ADD)


class FeedCache:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._read = redis.register_script(_READ)
        self._add = redis.register_script(_ADD)
        self._begin = redis.register_script(_BEGIN_BUILD)
        self._fill = redis.register_script(_FILL)
        self._finish = redis.register_script(_FINISH_BUILD)
        self._remove_author = redis.register_script(_REMOVE_AUTHOR)
        self._raise_floor = redis.register_script(_RAISE_FLOOR)

    async def read(
        self, key: str, *, before: int | None, count: int, since: int | None = None, renew_ms: int = 0
    ) -> Window:
        """Up to `count` entries below `before` (and at or above `since`), newest first."""
        reply = await self._read(keys=[key], args=self._read_args(before, since, count, renew_ms))
        return _window(reply)

    async def read_many(self, keys: Sequence[str], *, since: int | None, count: int) -> list[Window]:
        """`read` of several feeds in one round trip."""

        def build(pipe: Pipeline) -> None:
            for key in keys:
                READ_SCRIPT.queue(pipe, [key], self._read_args(None, since, count, 0))

        replies = await run_pipeline(self.redis, [READ_SCRIPT], build)
        return [_window(reply) for reply in replies]

    @staticmethod
    def _read_args(before: int | None, since: int | None, count: int, renew_ms: int) -> list[Any]:
        upper = "+" if before is None else "(" + floor_marker(before)
        lower = "-" if since is None else "[" + floor_marker(since)
        return [upper, lower, count, renew_ms]

    async def state(self, key: str) -> CacheState:
        return (await self.read(key, before=None, count=0)).state

    async def queue_add(
        self, pipe: Pipeline, key: str, entries: Iterable[Entry], *, maxlen: int, renew_ms: int = 0
    ) -> None:
        """Queues an `add`; the caller runs the pipeline with `reload_if_lost([ADD_SCRIPT], …)`."""
        members = [entry.member for entry in entries]
        ADD_SCRIPT.queue(pipe, [key], [maxlen, renew_ms, *members])

    async def add(self, key: str, entries: Sequence[Entry], *, maxlen: int, renew_ms: int = 0) -> int:
        """Adds posts to a feed that exists; returns how many landed."""
        if not entries:
            return 0
        members = [entry.member for entry in entries]
        return int(await self._add(keys=[key], args=[maxlen, renew_ms, *members]))

    async def begin_build(self, key: str) -> bool:
        """Claims a missing feed for a build; False if it exists or another build runs."""
        return bool(await self._begin(keys=[key], args=[BUILD_TTL_MS]))

    async def fill(self, key: str, entries: Sequence[Entry]) -> None:
        for start in range(0, len(entries), 500):
            await self._fill(keys=[key], args=[entry.member for entry in entries[start : start + 500]])

    async def finish_build(self, key: str, *, floor: int, maxlen: int, ttl_ms: int) -> bool:
        """Publishes a build: complete from `floor` upwards, trimmed to `maxlen` entries."""
        return bool(await self._finish(keys=[key], args=[floor_marker(floor), maxlen, ttl_ms]))

    async def discard(self, key: str, entries: Sequence[Entry]) -> None:
        if entries:
            await self.redis.zrem(key, *(entry.member for entry in entries))

    def queue_discard(self, pipe: Pipeline, key: str, entry: Entry) -> None:
        pipe.zrem(key, entry.member)

    async def remove_author(self, key: str, author_id: int) -> int:
        return int(await self._remove_author(keys=[key], args=[f":{author_id}"]))

    async def raise_floor(self, key: str, floor: int) -> bool:
        """Drops everything below `floor` and marks the feed complete from there upwards."""
        return bool(await self._raise_floor(keys=[key], args=[floor_marker(floor)]))

    async def count_since(self, key: str, since: int) -> int:
        return int(await self.redis.zlexcount(key, "[" + floor_marker(since), "(" + PENDING))
