"""The Lua scripts behind one partition of a leaderboard period (layout in `keys.leaderboards`).

Every script takes KEYS = ready, users, entries of one partition; ranks across
partitions are put together by the caller (`resolvers/leaderboards/store.py`).
"""

from __future__ import annotations

from mediagraph.lua import Lua

# ARGV: expire-at ms (0: never), then per record: user, version, here (1: this is the
# record's partition), reached hex, stored score. A record older than the one seen is
# ignored; a newer one replaces the user's member, or forgets it when `here` is 0.
# Answers how many records were added here.
APPLY = """
local expire_at = tonumber(ARGV[1])
local applied, changed = 0, false
for i = 2, #ARGV, 5 do
  local user, version = ARGV[i], tonumber(ARGV[i + 1])
  local held = redis.call('HGET', KEYS[2], user)
  local newer = true
  if held then
    local seen, member = string.match(held, '^(%d+):(.*)$')
    if tonumber(seen) >= version then
      newer = false
    elseif member ~= '' then
      redis.call('ZREM', KEYS[3], member)
      redis.call('HINCRBY', KEYS[2], 'n', -1)
    end
  end
  if newer then
    changed = true
    if ARGV[i + 2] == '1' then
      local member = ARGV[i + 3] .. ':' .. user
      redis.call('ZADD', KEYS[3], ARGV[i + 4], member)
      redis.call('HSET', KEYS[2], user, ARGV[i + 1] .. ':' .. member)
      redis.call('HINCRBY', KEYS[2], 'n', 1)
      applied = applied + 1
    else
      redis.call('HSET', KEYS[2], user, ARGV[i + 1] .. ':')
    end
  end
end
if changed and expire_at > 0 then
  redis.call('PEXPIREAT', KEYS[2], expire_at)
  if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('PEXPIREAT', KEYS[3], expire_at) end
end
return applied
"""

# ARGV: anchor member ('' for none), anchor stored score, then user ids.
# Answers {0} when the partition is not loaded, else {1, size, anchor rank (-1 unless the
# anchor is here with that score), then per user: version seen ('0': never), rank here
# (-1: not here), stored score, member}.
STATE = """
local size = redis.call('ZCARD', KEYS[3])
local count = tonumber(redis.call('HGET', KEYS[2], 'n') or '0')
if redis.call('EXISTS', KEYS[1]) == 0 or count ~= size then return {0} end
local out = {1, size, -1}
if ARGV[1] ~= '' then
  local score = redis.call('ZSCORE', KEYS[3], ARGV[1])
  if score and tonumber(score) == tonumber(ARGV[2]) then out[3] = redis.call('ZRANK', KEYS[3], ARGV[1]) end
end
for i = 3, #ARGV do
  local held = redis.call('HGET', KEYS[2], ARGV[i])
  local seen, member = '0', ''
  if held then seen, member = string.match(held, '^(%d+):(.*)$') end
  local rank, score = -1, ''
  if member ~= '' then
    rank = redis.call('ZRANK', KEYS[3], member) or -1
    score = redis.call('ZSCORE', KEYS[3], member) or ''
  end
  out[#out + 1] = seen
  out[#out + 1] = rank
  out[#out + 1] = score
  out[#out + 1] = member
end
return out
"""

# KEYS: lock. ARGV: token, ms. Extends the lock only while this rebuild still holds it.
EXTEND_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

RELEASE_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


apply_script = Lua(APPLY)
state_script = Lua(STATE)
extend_lock_script = Lua(EXTEND_LOCK)
release_lock_script = Lua(RELEASE_LOCK)
