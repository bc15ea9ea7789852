"""The response's media type, as GraphQL over HTTP negotiates it from `Accept`.

`application/graphql-response+json` (asked for by current clients) lets the status code
speak: a request that fails before execution (it does not parse, does not validate, its
variables do not coerce, it costs too much) is answered 400 with no `data` entry, while
an operation that ran answers 200 whatever its errors. Under `application/json` (the
default, for clients written before the spec) every GraphQL answer is 200 as before.
"""

from __future__ import annotations

from typing import Any

GRAPHQL_RESPONSE = b"application/graphql-response+json; charset=utf-8"
JSON = b"application/json"

# Errors that mean "the request was wrong", raised before anything ran.
REQUEST_ERROR_CODES = frozenset(
    {"GRAPHQL_PARSE_FAILED", "GRAPHQL_VALIDATION_FAILED", "BAD_USER_INPUT", "QUERY_TOO_COMPLEX"}
)


def response_media_type(accept: bytes | None) -> bytes:
    """graphql-response+json when the client takes it at least as gladly as application/json."""
    if not accept or b"graphql-response+json" not in accept:
        return JSON
    preference: dict[str, float] = {}
    for item in accept.decode("latin-1").split(","):
        media, *parameters = (part.strip() for part in item.split(";"))
        quality = 1.0
        for parameter in parameters:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        preference[media.lower()] = max(quality, preference.get(media.lower(), 0.0))
    wanted = preference.get("application/graphql-response+json", 0.0)
    if wanted > 0 and wanted >= max(preference.get("application/json", 0.0), preference.get("*/*", 0.0)):
        return GRAPHQL_RESPONSE
    return JSON


def is_request_error(body: dict[str, Any]) -> bool:
    """Whether the body answers a request that failed before execution began."""
    errors = body.get("errors")
    if not errors or body.get("data") is not None:
        return False
    return all(
        "path" not in error and (error.get("extensions") or {}).get("code") in REQUEST_ERROR_CODES for error in errors
    )
