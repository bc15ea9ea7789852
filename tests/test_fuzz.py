"""Fuzzing: schemathesis generates operations over the published schema and sends them to a
real `mediagraph serve`; whatever a client sends, it gets an answer with a known code.

Every query and mutation field is fuzzed anonymously and with a signed-up user's bearer
token. A response fails the run when its status is 5xx, its body is not a GraphQL
response, or any error lacks a known `extensions.code` (INTERNAL_SERVER_ERROR is not one).
Generation is seeded (MEDIAGRAPH_FUZZ_SEED), so a failure reproduces with the same seed;
MEDIAGRAPH_FUZZ_EXAMPLES sets the examples per field and mode (README: the long run).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from schemathesis.graphql import nodes

from mediagraph import errors
from tests.support.factories import PASSWORD, REGISTER, unique_name
from tests.support.servers import LiveServers

pytestmark = pytest.mark.slow

EXAMPLES_PER_FIELD = int(os.environ.get("MEDIAGRAPH_FUZZ_EXAMPLES", "30"))
SEED = int(os.environ.get("MEDIAGRAPH_FUZZ_SEED", "15"))
# 35 fields x 30 examples per mode: at least 2,000 operations per run over both modes.
# (A field without arguments has few distinct selections, so hypothesis may stop early.)
MINIMUM_OPERATIONS_PER_MODE = min(1000, 25 * EXAMPLES_PER_FIELD)
MAX_SAFE_INTEGER = 2**53 - 1

# Scalars schemathesis has no strategy for. Count is an output type only; Upload travels as a
# multipart file, so an inline literal of it must be refused with a code, never crash.
schemathesis.graphql.scalar("Count", st.integers(min_value=0, max_value=MAX_SAFE_INTEGER).map(nodes.Int))
schemathesis.graphql.scalar("Upload", st.text(max_size=20).map(nodes.String))


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


# Every user error's code, and graphql-core's parse and validation failures as
# `schema/extensions.py` codes them: anything else (INTERNAL_SERVER_ERROR) is a defect.
KNOWN_CODES = frozenset(
    {cls.code for cls in (errors.UserError, *_subclasses(errors.UserError))}
    | {"GRAPHQL_PARSE_FAILED", "GRAPHQL_VALIDATION_FAILED"}
)


def problem(response: requests.Response) -> str | None:
    """Why a response is not an acceptable answer, or None."""
    if response.status_code >= 500:
        return f"HTTP {response.status_code}: {response.text[:300]}"
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}, not JSON: {response.text[:300]}"
    if response.status_code != 200:
        return None  # a plain HTTP refusal (400) of a request that cannot run
    if not isinstance(body, dict) or not ({"data", "errors"} & body.keys()):
        return f"not a GraphQL response: {response.text[:300]}"
    for error in body.get("errors") or ():
        code = (error.get("extensions") or {}).get("code")
        if code not in KNOWN_CODES:
            return f"error coded {code}: {error}"
    return None


@dataclass
class Findings:
    operations: int = 0
    # The first failing query per field, so one defect is reported once per field.
    failures: dict[str, str] = field(default_factory=dict)

    def report(self) -> str:
        return "\n\n".join(f"{label}: {failure}" for label, failure in sorted(self.failures.items()))


def fuzz_field(operation: Any, findings: Findings, send: Any) -> None:
    label = operation.label

    # A seed per field, so adding a field does not change what the others generate.
    @seed(SEED ^ zlib.crc32(label.encode()))
    @settings(
        max_examples=EXAMPLES_PER_FIELD,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def check(case: Any) -> None:
        findings.operations += 1
        found = problem(send(case))
        if found is not None and label not in findings.failures:
            findings.failures[label] = f"{found}\n  operation: {case.body}"

    check()


def fuzz(schema: Any, base_url: str, headers: dict[str, str]) -> Findings:
    findings = Findings()
    session = requests.Session()

    def send(case: Any) -> requests.Response:
        return case.call(base_url=base_url, session=session, headers=headers, timeout=30)  # type: ignore[no-any-return]

    for result in schema.get_all_operations():
        fuzz_field(result.ok(), findings, send)
    return findings


@pytest.fixture(scope="module")
def fuzz_server(live_servers: LiveServers) -> str:
    return live_servers.start()


@pytest.fixture(scope="module")
def fuzz_schema(fuzz_server: str) -> Any:
    return schemathesis.graphql.from_url(f"{fuzz_server}/graphql")


@pytest.fixture(scope="module")
def bearer(fuzz_server: str) -> str:
    variables = {"username": unique_name("fuzz"), "password": PASSWORD}
    response = httpx.post(f"{fuzz_server}/graphql", json={"query": REGISTER, "variables": variables}, timeout=30)
    return f"Bearer {response.json()['data']['register']['token']}"


@pytest.mark.parametrize("authenticated", [False, True], ids=["anonymous", "authenticated"])
def test_no_generated_operation_gets_a_server_error(fuzz_server, fuzz_schema, bearer, authenticated, record_property):
    findings = fuzz(fuzz_schema, fuzz_server, {"authorization": bearer} if authenticated else {})
    record_property("suite: fuzzed operations", findings.operations)
    assert not findings.failures, findings.report()
    assert findings.operations >= MINIMUM_OPERATIONS_PER_MODE
