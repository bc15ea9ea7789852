"""The roll-up goes from a counter's token and figures straight to the row it stores: the
rows must be those the counter objects give (`value_of`), for every kind of counter, and
a counter Redis no longer holds must give none."""

from __future__ import annotations

from datetime import UTC, datetime

from mediagraph.keys.playback import GRANULARITIES, Counter, Entity, bucket_start
from mediagraph.keys.playback.scripts import RawCounter, value_of
from mediagraph.workers.playback import counter_rows

NOW = datetime(2031, 5, 6, 9, 0, tzinfo=UTC)
# 2025-11-27 23:59 UTC in minutes, hours and days since the epoch of the buckets.
INDEXES = {"minute": 29_404_799, "hour": 490_079, "day": 20_419}


def _counters(channel_id: int) -> list[Counter]:
    counters = []
    for entity in (
        Entity.stream(123_456_789_012, channel_id),
        Entity.stream(5, channel_id),
        Entity.of_channel(channel_id),
    ):
        counters.append(Counter(entity))
        counters += [Counter(entity, granularity, INDEXES[granularity.value]) for granularity in GRANULARITIES]
    return counters


def _rows_from_objects(copied: dict[int, list[tuple[Counter, RawCounter]]]) -> tuple[list[tuple], list[tuple]]:
    totals, buckets = [], []
    for pairs in copied.values():
        for counter, raw in pairs:
            value = value_of(counter, raw)
            if value is None:
                continue
            entity, granularity = value.counter.entity, value.counter.granularity
            if granularity is None:
                totals.append((entity.kind.value, entity.id, value.generation, value.plays, value.watch_ms, NOW))
            else:
                start = bucket_start(value.counter.index, granularity)
                buckets.append(
                    (
                        entity.kind.value,
                        entity.id,
                        granularity.value,
                        start,
                        value.generation,
                        value.plays,
                        value.peak,
                        value.watch_ms,
                        value.unique_viewers,
                        NOW,
                    )
                )
    return totals, buckets


def test_rows_are_those_the_counter_objects_give() -> None:
    copied: dict[int, list[tuple[Counter, RawCounter]]] = {}
    for channel_id in (7, 8):
        copied[channel_id] = [
            (counter, (str(70 + n).encode(), str(n).encode(), b"2" if n % 2 else None, b"1500", None))
            for n, counter in enumerate(_counters(channel_id))
        ]
    # Counters gone from Redis meanwhile (expired, or forgotten by another worker).
    copied[7][3] = (copied[7][3][0], (None, None, None, None, None))
    copied[8][0] = (copied[8][0][0], (None, b"4", None, None, None))

    totals, buckets = counter_rows(
        {channel: [(counter.token, raw) for counter, raw in pairs] for channel, pairs in copied.items()}, NOW
    )

    expected_totals, expected_buckets = _rows_from_objects(copied)
    assert totals == expected_totals
    assert buckets == expected_buckets
    assert len(totals) + len(buckets) == 2 * len(_counters(7)) - 2


def test_figures_as_numbers_give_the_same_rows_as_figures_as_read() -> None:
    counter = Counter(Entity.stream(9, 3), GRANULARITIES[1], INDEXES["hour"])
    read = counter_rows({3: [(counter.token, (b"5", b"6", b"7", b"8", b"9"))]}, NOW)
    numbers = counter_rows({3: [(counter.token, (5, 6, 7, 8, 9))]}, NOW)
    assert read == numbers
    assert read[1][0][3] == bucket_start(INDEXES["hour"], GRANULARITIES[1])
