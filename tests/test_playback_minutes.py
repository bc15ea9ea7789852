"""A stream's minute (the keys, counters and channels its heartbeats name) is built once and
kept: what is kept must be what a fresh build gives, for every key space, stream and minute."""

from __future__ import annotations

import pytest

from mediagraph.keys import KeySpace
from mediagraph.keys.playback import Entity, scripts
from mediagraph.keys.playback.scripts import _build_minute, _minute_of

MINUTE_MS = 60_000
# 2025-11-27 23:59:00 UTC: the next minute is in another hour and another day.
LAST_MINUTE_OF_A_DAY_MS = 1_764_287_940_000


def test_a_kept_minute_is_what_a_fresh_build_gives() -> None:
    spaces = [KeySpace("mg:a:"), KeySpace("mg:b:"), KeySpace("mg:a:", sharded_pubsub=True)]
    streams = [Entity.stream(1, 7), Entity.stream(2, 7), Entity.stream(1, 8)]
    moments = [LAST_MINUTE_OF_A_DAY_MS + offset for offset in (0, 59_999, MINUTE_MS, MINUTE_MS + 1)]
    for _ in range(2):  # the second pass reads what the first one kept
        for keys in spaces:
            for stream in streams:
                for played_ms in moments:
                    assert _minute_of(keys, stream, played_ms) == _build_minute(keys, stream, played_ms)


def test_the_next_minute_names_other_counters() -> None:
    keys, stream = KeySpace("mg:c:"), Entity.stream(3, 9)
    first = _minute_of(keys, stream, LAST_MINUTE_OF_A_DAY_MS)
    later = _minute_of(keys, stream, LAST_MINUTE_OF_A_DAY_MS + MINUTE_MS)
    assert later.indexes[0] == first.indexes[0] + 1
    assert later.indexes[1:] != first.indexes[1:]  # a new hour and a new day too
    assert set(later.keys) != set(first.keys)


def test_the_kept_minutes_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scripts, "MINUTES_KEPT", 10)
    keys = KeySpace("mg:d:")
    for media_id in range(50):
        _minute_of(keys, Entity.stream(media_id, 1), LAST_MINUTE_OF_A_DAY_MS)
    assert len(scripts._minutes) <= 10
    # The newest are the ones kept.
    assert (keys.prefix, False, 49, 1, LAST_MINUTE_OF_A_DAY_MS // MINUTE_MS) in scripts._minutes
