"""Redis layout of the engagement event stream (likes, comments, views) that hot media consume."""

from __future__ import annotations

from mediagraph.keys import KeySpace
from mediagraph.lua import Lua


def engagement_stream(keys: KeySpace) -> str:
    return keys.key("events", "engagement")


# KEYS: the stream. ARGV: its approximate length bound, the arguments per event (its fields'
# names and values, as many for each), then each event's. Answers how many it appended.
APPEND_EVENTS = Lua("""
local width = tonumber(ARGV[2])
for i = 3, #ARGV, width do
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(ARGV, i, i + width - 1))
end
return (#ARGV - 2) / width
""")
