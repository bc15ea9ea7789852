"""The Lua source of the playback scripts; `playback_scripts` runs them and states their invariants.

Every key a script touches is passed in KEYS, and one script's keys share a hash slot
(a channel's, or the claimed session's), so each stays legal in a Redis Cluster.
"""

# KEYS: 1 the session's claim. ARGV: 1 media id, 2 ttl, 3 the media's channel, or '' when
# the caller has not looked it up. Returns {0} when the session belongs to another media,
# {1, channel} when it already was this media's, {3, channel} when this call bound it,
# {2} when unclaimed and no channel was given.
CLAIM = """
local claimed = redis.call('GET', KEYS[1])
if claimed then
  local media, channel = string.match(claimed, '^(%d+):(%d+)$')
  if media ~= ARGV[1] then return {0} end
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  return {1, channel}
end
if ARGV[3] == '' then return {2} end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. ARGV[3], 'EX', ARGV[2])
return {3, ARGV[3]}
"""

# KEYS: 1 session record, 2 churn counter, 3 dirty set, then per entity (stream, channel):
#       total, live set, minute, hour, day.
# ARGV: 1 session id, 2 media id, 3-5 minute/hour/day index, 6 now (ms), 7 live window (ms),
#       8 generation for counters created now, 9 session ttl, 10 churn limit, 11 churn window,
#       then per entity: total token/ttl, minute token/ttl, hour token/ttl, day token/ttl,
#       then 28 played at (ms), 29 the signed-in viewer's id or '', 30 the longest gap between
#       heartbeats that counts as watched (ms), 31-34 the live channels of stream and channel
#       and their stats channels, or '' when the caller publishes (a cluster: those channels
#       live in other slots), 35 the stream's channel when the script claims the session
#       itself (KEYS 14, the claim), else '', 36 the channel's member in the roll-up's indexes
#       when the script names it there itself (one Redis: the last two KEYS, the index of
#       channels due and the index of growth), else '' (the caller names it), 37 '1' when the
#       heartbeat names its channel due at once, '0' when as growth due at ARGV 38 (ms) unless
#       already named (a play found new is named due at once either way).
# The session record also holds its play: `st` (first played at), `lp` (last played at), `w`
# (watched ms: gaps between heartbeats, each capped) and `vw` (viewer); a change names the
# play (`p:<session>`) in the dirty set. Counters gain `w` (watched ms counted at each
# heartbeat's played-at) and, on buckets, `u` (distinct viewers: signed-in ones by id, kept
# as `v<id>` fields of the same hash, each anonymous session as one).
HEARTBEAT = """
-- How much longer than twice the live window a live set is kept after its last renewal.
local LIVE_SET_SLACK_MS = 180000
-- The claim first (CLAIM's rules), when the caller passes it: ARGV[35] the stream's channel
-- and KEYS[14] the session's claim. Only on one Redis: the claim lives in another slot.
local bound_now = false
if ARGV[35] ~= '' then
  local claimed = redis.call('GET', KEYS[14])
  if claimed then
    if string.match(claimed, '^(%d+):') ~= ARGV[2] then return {'conflict'} end
    redis.call('EXPIRE', KEYS[14], ARGV[9])
  else
    redis.call('SET', KEYS[14], ARGV[2] .. ':' .. ARGV[35], 'EX', ARGV[9])
    bound_now = true
  end
end
local record = redis.call('HMGET', KEYS[1], 'media', 'm', 'h', 'd', 'lp')
if record[1] and record[1] ~= ARGV[2] then return {'conflict'} end
local first = not record[1]
if first then
  local used = redis.call('INCR', KEYS[2])
  if used == 1 then redis.call('EXPIRE', KEYS[2], ARGV[11]) end
  if used > tonumber(ARGV[10]) then
    -- A refused session keeps nothing, its claim included.
    if bound_now then redis.call('DEL', KEYS[14]) end
    return {'limited', redis.call('TTL', KEYS[2])}
  end
end
local now = tonumber(ARGV[6])
local index = {tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])}
local last = {tonumber(record[2]) or -1, tonumber(record[3]) or -1, tonumber(record[4]) or -1}
local counts = {first, index[1] > last[1], index[2] > last[2], index[3] > last[3]}
-- A heartbeat older than the minute the session last counted in (a late retry) counts
-- nothing and sets no peak: it only keeps the session live.
local current = index[1] >= last[1]
local played = tonumber(ARGV[28])
local viewer = ARGV[29]
local gap = 0
if not first and record[5] then
  local last_played = tonumber(record[5])
  if played > last_played then gap = math.min(played - last_played, tonumber(ARGV[30])) end
end

-- Tokens to name in the dirty set, added in one SADD at the end.
local dirty = {}

local function entity(base, argbase)
  local total = KEYS[base]
  local state = redis.call('HMGET', total, 'id', 'lv', 'v')
  -- The total outlives every bucket of its entity: its time to live is renewed whenever one
  -- of them is created (and so at least once a minute while the entity is watched).
  local renew = not state[1]
  if renew then
    redis.call('HSET', total, 'id', ARGV[8], 'n', 0, 'peak', 0, 'lv', 0, 'v', 0)
    state = {ARGV[8], '0', '0'}
  end
  if counts[1] or gap > 0 then dirty[#dirty + 1] = ARGV[argbase] end
  if counts[1] then redis.call('HINCRBY', total, 'n', 1) end
  if gap > 0 then redis.call('HINCRBY', total, 'w', gap) end
  local live = KEYS[base + 1]
  local window = tonumber(ARGV[7])
  local since = now - window
  -- Live sessions are those seen within the window (ZCOUNT): the set is trimmed, and its time
  -- to live renewed, when a session joins it or one of its sessions enters a new minute, so at
  -- least once a minute per session; the slack keeps it alive between two of those.
  if redis.call('ZADD', live, 'GT', now, ARGV[1]) == 1 or counts[2] then
    redis.call('ZREMRANGEBYSCORE', live, '-inf', '(' .. since)
    redis.call('PEXPIRE', live, window * 2 + LIVE_SET_SLACK_MS)
  end
  local viewers = redis.call('ZCOUNT', live, since, '+inf')
  local version = tonumber(state[3]) or 0
  local changed = 0
  if tonumber(state[2]) ~= viewers then
    version = math.max(version + 1, now)
    redis.call('HSET', total, 'lv', viewers, 'v', version)
    changed = 1
  end
  for g = 1, 3 do
    local key = KEYS[base + 1 + g]
    local token, ttl = ARGV[argbase + 2 * g], ARGV[argbase + 2 * g + 1]
    local bucket = redis.call('HMGET', key, 'id', 'peak')
    local peak = tonumber(bucket[2]) or -1
    local named = false
    -- A bucket written to exists (with this generation when created now) and is named dirty.
    local function ensure()
      if not bucket[1] then
        redis.call('HSET', key, 'id', ARGV[8], 'n', 0, 'peak', 0)
        redis.call('EXPIRE', key, ttl)
        bucket[1] = ARGV[8]
        peak = 0
        renew = true
      end
      if not named then
        dirty[#dirty + 1] = token
        named = true
      end
    end
    if counts[g + 1] then
      ensure()
      redis.call('HINCRBY', key, 'n', 1)
      if viewer == '' or redis.call('HSETNX', key, 'v' .. viewer, 1) == 1 then
        redis.call('HINCRBY', key, 'u', 1)
      end
    end
    if gap > 0 then
      ensure()
      redis.call('HINCRBY', key, 'w', gap)
    end
    if current and viewers > peak then
      ensure()
      redis.call('HSET', key, 'peak', viewers)
    end
  end
  if renew then redis.call('EXPIRE', total, ARGV[argbase + 1]) end
  return {viewers, changed, version}
end

local stream = entity(4, 12)
local channel = entity(9, 20)
local counted_in = {'media', ARGV[2], 'm', math.max(index[1], last[1]),
  'h', math.max(index[2], last[2]), 'd', math.max(index[3], last[3])}
if first then
  for _, field in ipairs({'st', played, 'lp', played, 'w', 0, 'vw', viewer}) do counted_in[#counted_in + 1] = field end
  dirty[#dirty + 1] = 'p:' .. ARGV[1]
elseif gap > 0 then
  counted_in[#counted_in + 1] = 'lp'
  counted_in[#counted_in + 1] = played
  redis.call('HINCRBY', KEYS[1], 'w', gap)
  dirty[#dirty + 1] = 'p:' .. ARGV[1]
end
redis.call('HSET', KEYS[1], unpack(counted_in))
redis.call('EXPIRE', KEYS[1], ARGV[9])
if #dirty > 0 then redis.call('SADD', KEYS[3], unpack(dirty)) end
if ARGV[36] ~= '' then
  if first or ARGV[37] == '1' then
    redis.call('ZADD', KEYS[#KEYS - 1], 'GT', ARGV[6], ARGV[36])
  else
    redis.call('ZADD', KEYS[#KEYS], 'NX', ARGV[38], ARGV[36])
  end
end
local flags = {}
for i = 1, 4 do flags[i] = counts[i] and 1 or 0 end
-- What the bus would publish (`resolvers/playback`), in the same round trip.
if ARGV[31] ~= '' then
  for i, live in ipairs({stream, channel}) do
    if live[2] == 1 then
      redis.call('PUBLISH', ARGV[30 + i],
        '{"viewers":' .. string.format('%d', live[1]) .. ',"version":' .. string.format('%.0f', live[3]) .. '}')
    end
  end
  if counts[1] or counts[2] or counts[3] or counts[4] then
    redis.call('PUBLISH', ARGV[33], '{"counted":true}')
    redis.call('PUBLISH', ARGV[34], '{"counted":true}')
  end
end
return {'ok', flags[1], flags[2], flags[3], flags[4],
  stream[1], stream[2], stream[3], channel[1], channel[2], channel[3]}
"""

# KEYS: 1 live set, 2 the entity's total. ARGV: 1 now (ms), 2 live window (ms).
SWEEP = """
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - tonumber(ARGV[2])))
local viewers = redis.call('ZCARD', KEYS[1])
local state = redis.call('HMGET', KEYS[2], 'lv', 'v')
if not state[1] or tonumber(state[1]) == viewers then return false end
local version = math.max((tonumber(state[2]) or 0) + 1, now)
redis.call('HSET', KEYS[2], 'lv', viewers, 'v', version)
return {viewers, version}
"""

# KEYS: 1 dirty set, then the counters copied. ARGV: per counter token, id, n, peak, w, u as read.
FORGET_COPIED = """
for i = 2, #KEYS do
  local j = (i - 2) * 6
  local now = redis.call('HMGET', KEYS[i], 'id', 'n', 'peak', 'w', 'u')
  local same = true
  for f = 1, 5 do
    if (now[f] or '') ~= ARGV[j + 1 + f] then same = false end
  end
  if not now[1] or same then
    redis.call('SREM', KEYS[1], ARGV[j + 1])
  end
end
return redis.call('SCARD', KEYS[1])
"""

# KEYS: 1 dirty set, then the session records of the plays copied.
# ARGV: per play its token, `lp` and `w` as read.
FORGET_PLAYS = """
for i = 2, #KEYS do
  local j = (i - 2) * 3
  local now = redis.call('HMGET', KEYS[i], 'lp', 'w')
  if not now[1] or ((now[1] or '') == ARGV[j + 2] and (now[2] or '') == ARGV[j + 3]) then
    redis.call('SREM', KEYS[1], ARGV[j + 1])
  end
end
return redis.call('SCARD', KEYS[1])
"""

# What a roll-up copies from one channel, in one reply rather than one per hash (a visit
# reads thousands, and a client's cost per reply outweighed the reading).
# KEYS: the counters' hashes, then the session records. ARGV: 1 how many counters.
READ_COPIES = """
local counters = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS do
  if i <= counters then
    out[i] = redis.call('HMGET', KEYS[i], 'id', 'n', 'peak', 'w', 'u')
  else
    out[i] = redis.call('HMGET', KEYS[i], 'media', 'st', 'lp', 'w', 'vw')
  end
end
return out
"""

# KEYS: 1 the roll-up's index of channels due. ARGV: per channel visited, its member and its
# score as read. Each leaves the index unless a heartbeat named it again since (a later score).
LEAVE_DUE = """
for i = 1, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) <= tonumber(ARGV[i + 1]) then redis.call('ZREM', KEYS[1], ARGV[i]) end
end
return redis.call('ZCARD', KEYS[1])
"""
