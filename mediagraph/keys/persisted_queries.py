"""Automatic persisted queries: one hash of query texts by SHA-256, and their registration order.

Both keys share the `{persisted}` hash tag, so the script that registers a query and
evicts the oldest stays in one Redis Cluster slot.
"""

from __future__ import annotations

from mediagraph.keys import KeySpace


def persisted_query_texts(keys: KeySpace) -> str:
    return keys.key("apq", "{persisted}", "texts")


def persisted_query_order(keys: KeySpace) -> str:
    return keys.key("apq", "{persisted}", "order")


# KEYS: texts, order. ARGV: hash, text, registration score, most kept. Registers and evicts the oldest.
REGISTER_SCRIPT = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
local excess = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if excess > 0 then
  local oldest = redis.call('ZPOPMIN', KEYS[2], excess)
  for i = 1, #oldest, 2 do
    redis.call('HDEL', KEYS[1], oldest[i])
  end
end
return 1
"""
