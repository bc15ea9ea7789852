"""The Redis side of view- and like-sorted pagination sessions: their key, and the step script.

A session is soft state and lives only here (a page never writes to PostgreSQL):

- `paging:{<session id>}:<sort>:<list>` a sorted set, media id -> delivery number: every
  media the session has delivered (in a page or as omitted), numbered in delivery order.

The sort and the list (a signature of its tag filter) are part of the key, so a session
id can never mix two lists' deliveries. The whole session is one key (one Cluster slot,
`{<session id>}`), with the session's TTL, renewed by every page. The rest of a
session's state rides in its signed cursors: the key position, the sync generation the
page was read at, and how many items had been delivered up to that edge. A cursor may
be used again (a retry, or going back), so its own copy is the one that counts.

A gone key (expired, evicted, or Redis restarted without it) is a gone session: the
script says so and the page answers CURSOR_EXPIRED, never a page that could repeat items.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from mediagraph.keys import KeySpace
from mediagraph.lua import Lua

# One step of a session, atomic, so concurrent requests of a session behave as if one
# ran after the other:
#   1. a first-page cursor stores the session (its served ids ride in the cursor), else
#      the session must exist;
#   2. `rewind` >= 0 forgets what was delivered from that number on (the cursor is used
#      again: a retry, or going back); -1 leaves the deliveries as they are;
#   3. each candidate list (ids in the order they would be served) is filtered of what
#      the session delivered; up to `record` of the rest are recorded as delivered from
#      number `next`, and up to `want` of the rest are returned (want > record looks
#      ahead: whether more would follow).
# ARGV: ttl, rewind, next, inline count, inline ids…, then per list: want, record, count, ids…
# Returns false for a gone session, else one array of the ids found per list.
STEP = """
local key = KEYS[1]
local at = 5
local inline = tonumber(ARGV[4])
if inline > 0 then
  for i = 0, inline - 1 do
    redis.call('ZADD', key, i, ARGV[at + i])
  end
  at = at + inline
elseif redis.call('EXISTS', key) == 0 then
  return false
end
local rewind = tonumber(ARGV[2])
if rewind >= 0 then
  redis.call('ZREMRANGEBYSCORE', key, rewind, '+inf')
end
local seq = tonumber(ARGV[3])
local out = {}
while at <= #ARGV do
  local want = tonumber(ARGV[at])
  local record = tonumber(ARGV[at + 1])
  local count = tonumber(ARGV[at + 2])
  at = at + 3
  local found = {}
  for i = at, at + count - 1 do
    if #found >= want then break end
    local id = ARGV[i]
    if not redis.call('ZSCORE', key, id) then
      found[#found + 1] = id
      if #found <= record then
        redis.call('ZADD', key, seq, id)
        seq = seq + 1
      end
    end
  end
  out[#out + 1] = found
  at = at + count
end
redis.call('EXPIRE', key, ARGV[1])
return out
"""

STEP_SCRIPT = Lua(STEP)


@dataclass(frozen=True)
class Candidates:
    """Ids in serving order; find up to `want` not yet delivered, record the first `record` of them."""

    ids: Sequence[int]
    want: int
    record: int


class SessionGone(Exception):
    """The session's key is gone: expired, evicted, or lost with a Redis restart."""


@dataclass
class Step:
    """One STEP call, to run alone (`PageSessions.step`) or in a caller's pipeline (`queue`, `parse`)."""

    key: str
    args: list[int]

    def queue(self, pipe: Pipeline) -> None:
        STEP_SCRIPT.queue(pipe, [self.key], self.args)

    def parse(self, reply: Any) -> list[list[int]]:
        """Per list, the undelivered ids found; raises SessionGone."""
        if reply is None:
            raise SessionGone
        return [[int(raw) for raw in found] for found in reply]


class PageSessions:
    def __init__(self, redis: Redis, keys: KeySpace, *, ttl_seconds: int) -> None:
        self.redis = redis
        self.keys = keys
        self.ttl_seconds = ttl_seconds

    def delivered_key(self, session_id: int, sort: str, list_signature: str) -> str:
        return self.keys.key("paging", f"{{{session_id}}}", sort.lower(), list_signature)

    def step_of(
        self,
        key: str,
        *,
        rewind: int | None,
        next_number: int,
        inline: Sequence[int] = (),
        lists: Sequence[Candidates],
    ) -> Step:
        args: list[int] = [self.ttl_seconds, -1 if rewind is None else rewind, next_number, len(inline), *inline]
        for candidates in lists:
            args += [candidates.want, candidates.record, len(candidates.ids), *candidates.ids]
        return Step(key, args)

    async def step(
        self,
        key: str,
        *,
        rewind: int | None,
        next_number: int,
        inline: Sequence[int] = (),
        lists: Sequence[Candidates],
    ) -> list[list[int]]:
        """Filter and record one step atomically: per list, the undelivered ids found (raises SessionGone)."""
        step = self.step_of(key, rewind=rewind, next_number=next_number, inline=inline, lists=lists)
        return step.parse(await STEP_SCRIPT.run(self.redis, [key], step.args))
