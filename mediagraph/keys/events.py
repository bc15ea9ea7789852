"""Redis layout of the engagement event stream (likes, comments, views) that hot media consume."""

from __future__ import annotations

from mediagraph.keys import KeySpace
from mediagraph.lua import Lua


def engagement_stream(keys: KeySpace) -> str:
    return keys.key("events", "engagement")


# KEYS: the stream. ARGV: its approximate length bound, then per event: kind, media id, delta.
# Answers how many it appended.
APPEND_EVENTS = Lua("""
for i = 2, #ARGV, 3 do
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'kind', ARGV[i], 'media_id', ARGV[i + 1], 'delta', ARGV[i + 2])
end
return (#ARGV - 1) / 3
""")
