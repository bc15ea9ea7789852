"""Redis layout of the engagement event stream (likes, comments, views) that hot media consume."""

from __future__ import annotations

from mediagraph.keys import KeySpace


def engagement_stream(keys: KeySpace) -> str:
    return keys.key("events", "engagement")
