"""Custom scalars shared by every domain."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import TYPE_CHECKING, NewType

import strawberry
from starlette.datastructures import UploadFile
from strawberry.exceptions import StrawberryInputCoercionError
from strawberry.file_uploads import Upload
from strawberry.schema.types.base_scalars import DateDefinition, DateTimeDefinition, UUIDDefinition
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


def _parse_upload(value: object) -> UploadFile:
    # Only a multipart request's file part is a file: a literal or a JSON value in its place
    # would reach the resolver as text.
    if isinstance(value, UploadFile):
        return value
    # Strawberry's coercion error, as its own scalars raise: clients see BAD_USER_INPUT.
    raise StrawberryInputCoercionError(
        "An Upload is a file sent by the GraphQL multipart request specification: put null in the "
        "variable and name the file's part in `map`; a literal or a JSON value is not a file."
    )


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
    # Strawberry's own scalars, with what they hold said precisely and the specification each
    # follows named (`specifiedByURL`), so code generators and clients can map them to real types.
    dt.datetime: dataclasses.replace(
        DateTimeDefinition,
        description=(
            "A moment in time as an RFC 3339 date-time string, e.g. `2026-11-23T14:05:09.123456+00:00`. "
            "The server answers in UTC; inputs must carry an offset (`Z` or `±hh:mm`) and are refused without one."
        ),
        specified_by_url="https://www.rfc-editor.org/rfc/rfc3339#section-5.6",
    ),
    dt.date: dataclasses.replace(
        DateDefinition,
        description="A calendar date as an ISO 8601 extended-format string, `YYYY-MM-DD` (UTC days).",
        specified_by_url="https://www.iso.org/iso-8601-date-and-time-format.html",
    ),
    uuid.UUID: dataclasses.replace(
        UUIDDefinition,
        description=(
            "A UUID as its RFC 9562 string form, 36 characters of hexadecimal digits and hyphens, "
            "e.g. `1b4e28ba-2fa1-11d2-883f-0016d3cca427`; the nil UUID is refused where an id is expected."
        ),
        specified_by_url="https://www.rfc-editor.org/rfc/rfc9562",
    ),
    Upload: strawberry.scalar(
        name="Upload",
        description=(
            "A file sent beside the operation by the GraphQL multipart request specification: the variable "
            "holds null in `operations` and `map` names the multipart field carrying the file. Input only."
        ),
        specified_by_url="https://github.com/jaydenseric/graphql-multipart-request-spec",
        serialize=lambda value: value,
        parse_value=_parse_upload,
    ),
}
