"""Custom scalars shared by every domain."""

from __future__ import annotations

from typing import TYPE_CHECKING, NewType

import strawberry
from strawberry.types.scalar import ScalarDefinition

from mediagraph.errors import BadUserInput

# Integers beyond this lose precision in JavaScript and in every IEEE 754 double (RFC 8259 §6).
MAX_COUNT = 2**53 - 1


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise TypeError(f"a Count is a whole number, not {value!r}")
    count = int(value)
    if not 0 <= count <= MAX_COUNT:
        raise ValueError(f"a Count lies between 0 and 2^53 - 1, not {count}")
    return count


def _parse_count(value: object) -> int:
    try:
        return _count(value)
    except (TypeError, ValueError) as error:
        raise BadUserInput(str(error)) from None


# The Python type of counts, which the schema maps to the `Count` scalar (`SCALARS`).
# Type checkers see a plain int, so resolvers return their counts as they are.
if TYPE_CHECKING:
    Count = int
else:
    Count = NewType("Count", int)

SCALARS: dict[object, ScalarDefinition] = {
    Count: strawberry.scalar(
        name="Count",
        description=(
            "How many of something there are (views, likes, comments, plays, followers, bytes): a whole number "
            "from 0 to 2^53 - 1, sent as a JSON number. Past 2^31 - 1, where GraphQL's Int stops, it keeps "
            "counting; up to 2^53 - 1 every JSON parser, JavaScript's included, reads it exactly."
        ),
        specified_by_url="https://www.rfc-editor.org/rfc/rfc8259#section-6",
        serialize=_count,
        parse_value=_parse_count,
    ),
}
