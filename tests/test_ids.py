from __future__ import annotations

from collections import Counter

from mediagraph.ids import SnowflakeGenerator


def test_ids_issued_a_millisecond_apart_spread_over_every_logical_shard():
    clock = iter(1_800_000_000 + n / 1000 for n in range(10_000))
    generator = SnowflakeGenerator(3, clock=lambda: next(clock))
    ids = [generator.next_id() for _ in range(6_400)]
    assert ids == sorted(set(ids))
    assert Counter(snowflake % 64 for snowflake in ids) == dict.fromkeys(range(64), 100)


def test_ids_stay_unique_and_increasing_within_one_millisecond_and_past_its_sequence():
    generator = SnowflakeGenerator(3, clock=lambda: 1_800_000_000.0)
    ids = [generator.next_id() for _ in range(10_000)]
    assert ids == sorted(set(ids))
