from __future__ import annotations

import base64
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mediagraph.errors import BadUserInput
from mediagraph.ids import SnowflakeGenerator, decode_id, from_global_id


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


def _decoded_the_long_way(global_id: str, expected_type: str) -> int | str:
    try:
        type_name, raw_id = from_global_id(global_id)
    except BadUserInput as error:
        return error.message
    return raw_id if type_name == expected_type else f"Expected a {expected_type} id, got a {type_name} id."


def _decoded(global_id: str, expected_type: str) -> int | str:
    try:
        return decode_id(global_id, expected_type)
    except BadUserInput as error:
        return error.message


def _encoded(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "text",
    [
        "Media:42",
        "Media:007",
        "Media:+5",
        "Media: 5",
        "Media:5_000",
        "Media:٥",
        "Media:0",
        f"Media:{(1 << 63) - 1}",
        f"Media:{1 << 63}",
        "Media:" + "1" * 36,
        "Media:5:6",
        "Media:",
        ":5",
        "User:5",
        "media:5",
        "Media:6f1c1f0e-6d3a-4c1e-9a53-2f7d7b0f6c11",
    ],
)
def test_decode_id_answers_as_the_full_parse_does(text):
    for global_id in (_encoded(text), _encoded(text) + "==", "!" + _encoded(text)):
        assert _decoded(global_id, "Media") == _decoded_the_long_way(global_id, "Media")


@given(st.text(max_size=60) | st.builds(_encoded, st.text(max_size=40)))
@settings(max_examples=500, deadline=None)
def test_decode_id_answers_as_the_full_parse_does_for_any_text(global_id):
    assert _decoded(global_id, "Media") == _decoded_the_long_way(global_id, "Media")
