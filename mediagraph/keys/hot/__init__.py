"""Redis layout of daily hot media, one sorted set and one state key per day (UTC).

- `…:scores:<day>` media id -> likes × 3 + comments × 2 + views, for media created that day.
  While the day is live it holds every scored media (so decrements stay exact); once
  it is history it keeps the top 10.
- `…:state:<day>`  `live:<ms>` once the day's scores were loaded from PostgreSQL as of
  that Redis time (events from before it are already counted), `final` once trimmed.
  Without it the day is rebuilt before any event is applied to it.

Every key carries the engagement stream's whole name as its hash tag, so it lives in
the stream's slot: one script can apply an event and acknowledge it atomically.
"""

from __future__ import annotations

from datetime import date

from mediagraph.keys import KeySpace
from mediagraph.keys.events import engagement_stream


def _tag(keys: KeySpace) -> str:
    return "{" + engagement_stream(keys) + "}"


def day_scores(keys: KeySpace, day: date) -> str:
    return keys.key("hot", _tag(keys), "scores", day.isoformat())


def day_state(keys: KeySpace, day: date) -> str:
    return keys.key("hot", _tag(keys), "state", day.isoformat())


def day_rebuild_lock(keys: KeySpace, day: date) -> str:
    return keys.key("hot", _tag(keys), "rebuild", day.isoformat())


def day_changed_channel(keys: KeySpace, day: date) -> str:
    """The day's scores or state changed (events applied, rebuilt, finalised); listeners re-read the top."""
    return keys.channel("hot", "day", day.isoformat())
