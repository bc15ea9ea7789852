"""A GraphQL request read from a JSON POST body or a GET query string, refused as Strawberry refuses it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from starlette.datastructures import QueryParams


class RequestRefused(Exception):
    """Not a GraphQL request at all: answered with an HTTP status and a plain-text reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(slots=True)
class GraphQLRequest:
    query: str | None
    variables: dict[str, Any] | None
    operation_name: str | None
    extensions: dict[str, Any] | None

    @classmethod
    def of(cls, data: dict[str, Any]) -> GraphQLRequest:
        for name, kind, described in MEMBERS:
            if not isinstance(data.get(name), kind | None):
                raise RequestRefused(400, f"The GraphQL operation's `{name}` must be {described} or null, if provided.")
        return cls(data.get("query"), data.get("variables"), data.get("operationName"), data.get("extensions"))


# Each member of a request body, the type it must have, and that type as Strawberry's refusals name it.
MEMBERS = (
    ("query", str, "a string"),
    ("variables", dict, "an object"),
    ("extensions", dict, "an object"),
    ("operationName", str, "a string"),
)


def _json(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        raise RequestRefused(400, "Unable to parse request body as JSON") from None


def from_json_body(body: bytes) -> GraphQLRequest:
    data = _json(body)
    if isinstance(data, list):
        raise RequestRefused(400, "Batching is not enabled")
    if not isinstance(data, dict):
        raise RequestRefused(400, "The request body must be a JSON object.")
    return GraphQLRequest.of(data)


def query_parameters(query_string: bytes) -> dict[str, str]:
    # The last value wins for a repeated parameter, as in Strawberry's view.
    return dict(QueryParams(query_string))


def from_query_parameters(parameters: dict[str, str]) -> GraphQLRequest:
    data: dict[str, Any] = dict(parameters)
    for name in ("variables", "extensions"):
        if name in data:
            data[name] = _json(data[name]) if data[name] else None
    return GraphQLRequest.of(data)
