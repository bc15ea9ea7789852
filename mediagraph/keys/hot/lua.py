"""Lua scripts over the hot media keys: each keeps a day's scores and state consistent in one step."""

from __future__ import annotations

from mediagraph.lua import Lua

# ARGV: how many. The state, then the best media with a positive score: {state, media, score, …};
# {} when the day is not loaded.
READ_TOP = Lua("""
local state = redis.call('GET', KEYS[2])
if not state then return {} end
local out = {state}
local top = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', '(0', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
for i = 1, #top do out[#out + 1] = top[i] end
return out
""")

# ARGV: how many to keep, expire-at ms. A live day becomes final: only its top stays.
FINALIZE = Lua("""
local state = redis.call('GET', KEYS[2])
if not state or state == 'final' then return 0 end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', 0)
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(tonumber(ARGV[1]) + 1))
redis.call('SET', KEYS[2], 'final', 'PXAT', ARGV[2])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return 1
""")

# KEYS: stream, then scores and state of each day. ARGV: group, day count, each day's
# expire-at ms, then per event: id, day number, media id, weighted delta. Answers the
# number applied, then the day numbers that need a rebuild (their events stay pending).
APPLY = Lua("""
local days = tonumber(ARGV[2])
local applied, missing, out = 0, {}, {}
for i = 3 + days, #ARGV, 4 do
  local id, day, media, delta = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
  local scores, state_key = KEYS[2 * day], KEYS[2 * day + 1]
  local state = redis.call('GET', state_key)
  if not state then
    missing[day] = true
  elseif redis.call('XACK', KEYS[1], ARGV[1], id) == 1 and state ~= 'final' then
    local as_of = tonumber(string.match(state, '^live:(%d+)$'))
    if tonumber(string.match(id, '^(%d+)-')) > as_of then
      redis.call('ZINCRBY', scores, delta, media)
      redis.call('PEXPIREAT', scores, ARGV[2 + day])
      applied = applied + 1
    end
  end
end
out[1] = applied
for day in pairs(missing) do out[#out + 1] = day end
return out
""")
