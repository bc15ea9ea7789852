"""The Lua scripts behind a leaderboard period (layout in `keys.leaderboards`).

Every script takes KEYS = ready, users, p0 … pN-1. Reads answer `{0}` when the period is
not loaded (no ready marker, or the hash and the partitions disagree), so the caller
rebuilds it from PostgreSQL and asks again. Ranks are 0-based positions here: the
position inside a partition (ZRANK, O(log n)) plus the sizes of the partitions before it.
"""

from __future__ import annotations

from mediagraph.lua import Lua

PRELUDE = """
local FIRST = 3
local function sizes()
  local out, total = {}, 0
  for i = FIRST, #KEYS do
    local n = redis.call('ZCARD', KEYS[i])
    out[#out + 1] = n
    total = total + n
  end
  return out, total
end
local function loaded(total)
  return redis.call('EXISTS', KEYS[1]) == 1 and redis.call('HLEN', KEYS[2]) == total
end
local function locate(user)
  local value = redis.call('HGET', KEYS[2], user)
  if not value then return nil end
  local _, part, reached = string.match(value, '^(%d+):(%d+):(%x+)$')
  return tonumber(part), reached .. ':' .. user
end
local function position(sz, part, member)
  local rank = redis.call('ZRANK', KEYS[FIRST + part], member)
  if not rank then return nil end
  for i = 1, part do rank = rank + sz[i] end
  return rank
end
local function slice(sz, out, start, count)
  local skip = start
  for i = 1, #sz do
    if count <= 0 then break end
    if skip >= sz[i] then
      skip = skip - sz[i]
    else
      local got = redis.call('ZRANGE', KEYS[FIRST + i - 1], skip, skip + count - 1, 'WITHSCORES')
      for j = 1, #got do out[#out + 1] = got[j] end
      count = count - #got / 2
      skip = 0
    end
  end
  return out
end
"""

# ARGV: start, count, anchor member ('' for none), anchor partition, anchor stored score, direction.
# Forward ('after'): resumes right after the anchor when it still holds that score (keyset); else at
# `start`. Backward ('before'): the `count` entries just above the anchor (or above position `start`;
# a negative `start` means the end of the board).
RANGE = (
    PRELUDE
    + """
local sz, total = sizes()
if not loaded(total) then return {0} end
local backward = ARGV[6] == 'before'
local start = tonumber(ARGV[1])
if start < 0 then start = total end
if ARGV[3] ~= '' then
  local part = tonumber(ARGV[4])
  if part < #sz then
    local score = redis.call('ZSCORE', KEYS[FIRST + part], ARGV[3])
    if score and tonumber(score) == tonumber(ARGV[5]) then
      start = position(sz, part, ARGV[3])
      if not backward then start = start + 1 end
    end
  end
end
local count = tonumber(ARGV[2])
if backward then
  local stop = math.min(start, total)
  start = math.max(0, stop - count)
  count = stop - start
end
return slice(sz, {1, total, start}, start, count)
"""
)

# ARGV: user ids. Answers {1, total, then per user: position or -1, stored score, member}.
ENTRIES = (
    PRELUDE
    + """
local sz, total = sizes()
if not loaded(total) then return {0} end
local out = {1, total}
for i = 1, #ARGV do
  local part, member = locate(ARGV[i])
  local at = part and part < #sz and position(sz, part, member)
  if at then
    out[#out + 1] = at
    out[#out + 1] = redis.call('ZSCORE', KEYS[FIRST + part], member)
    out[#out + 1] = member
  else
    out[#out + 1] = -1
    out[#out + 1] = ''
    out[#out + 1] = ''
  end
end
return out
"""
)

# ARGV: user id, radius. The entries from `radius` above the user to `radius` below,
# clipped at the top and the bottom: {1, total, first position, member, score, …}.
AROUND = (
    PRELUDE
    + """
local sz, total = sizes()
if not loaded(total) then return {0} end
local part, member = locate(ARGV[1])
local at = part and part < #sz and position(sz, part, member)
if not at then return {1, total, -1} end
local radius = tonumber(ARGV[2])
local start = math.max(0, at - radius)
return slice(sz, {1, total, start}, start, at - start + 1 + radius)
"""
)

# ARGV: expire-at ms (0: never), channel ('' for none), message, then per record:
# user, version, partition, reached hex, stored score. Older versions than the applied
# one are ignored, so concurrent writers and a rebuild can interleave in any order.
APPLY = (
    PRELUDE
    + """
local expire_at = tonumber(ARGV[1])
local applied, touched = 0, {}
for i = 4, #ARGV, 5 do
  local user, version, part = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local current = redis.call('HGET', KEYS[2], user)
  local newer = true
  if current then
    local held, held_part, held_reached = string.match(current, '^(%d+):(%d+):(%x+)$')
    if tonumber(held) >= version then
      newer = false
    else
      redis.call('ZREM', KEYS[FIRST + tonumber(held_part)], held_reached .. ':' .. user)
    end
  end
  if newer then
    redis.call('ZADD', KEYS[FIRST + part], ARGV[i + 4], ARGV[i + 3] .. ':' .. user)
    redis.call('HSET', KEYS[2], user, ARGV[i + 1] .. ':' .. ARGV[i + 2] .. ':' .. ARGV[i + 3])
    touched[FIRST + part] = true
    applied = applied + 1
  end
end
if applied > 0 then
  if expire_at > 0 then
    redis.call('PEXPIREAT', KEYS[2], expire_at)
    for key in pairs(touched) do redis.call('PEXPIREAT', KEYS[key], expire_at) end
  end
  if ARGV[2] ~= '' then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
end
return applied
"""
)

# KEYS: lock. ARGV: token, ms. Extends the lock only while this rebuild still holds it.
EXTEND_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

RELEASE_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


range_script = Lua(RANGE)
entries_script = Lua(ENTRIES)
around_script = Lua(AROUND)
apply_script = Lua(APPLY)
extend_lock_script = Lua(EXTEND_LOCK)
release_lock_script = Lua(RELEASE_LOCK)
