"""Every Prometheus metric mediagraph exports, and the small helpers the watched code calls.

With several server processes (`serve --processes N`) prometheus-client runs in its
multiprocess mode: each process writes its values to files under
PROMETHEUS_MULTIPROC_DIR, and a scrape of any process reads them all (`exposition.py`).
So every gauge states how processes combine: `livesum` for what each process holds
(sockets, connections), `mostrecent` for what any process measures of the shared
stores (worker lags), whichever measured last.

Label values come from closed sets (operation types, error codes, worker names, pools)
except operation names, which clients choose: `OperationNames` admits the first
`metrics_operation_names` distinct ones per process and counts the rest as `other`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

ANONYMOUS = "anonymous"
OTHER = "other"
DEFAULT_OPERATION_NAMES = 200
# Error codes are ours (mediagraph/errors.py and graphql-core's), but a code is only a label
# once it looks like one, and there are never more than this many.
MAX_ERROR_CODES = 50
ERROR_CODE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

OPERATION_SECONDS = Histogram(
    "mediagraph_graphql_operation_duration_seconds",
    "GraphQL queries and mutations, from the request read to the response built.",
    ["type", "name"],
    buckets=LATENCY_BUCKETS,
)
ERRORS = Counter("mediagraph_graphql_errors_total", "Errors in GraphQL responses, by extensions.code.", ["code"])
DOCUMENT_CACHE = Counter(
    "mediagraph_graphql_document_cache_total", "Document cache lookups (parsed and validated queries).", ["result"]
)
PERSISTED_QUERIES = Counter(
    "mediagraph_graphql_persisted_queries_total",
    "Automatic persisted query lookups by hash: hit (text known) or miss (client must resend it).",
    ["result"],
)
EXECUTIONS = Counter(
    "mediagraph_graphql_executions_total",
    "Operations run from a compiled execution plan (plan) or by graphql-core (graphql_core).",
    ["path"],
)

WEBSOCKETS = Gauge("mediagraph_websockets_open", "Open GraphQL websockets.", multiprocess_mode="livesum")
SUBSCRIPTIONS = Gauge(
    "mediagraph_subscriptions_active", "Running subscriptions by root field.", ["field"], multiprocess_mode="livesum"
)
PUSHES_SENT = Counter("mediagraph_subscription_pushes_total", "Subscription results sent to clients.")
PUSHES_COALESCED = Counter(
    "mediagraph_subscription_pushes_coalesced_total",
    "Subscription updates replaced by a newer one before they were sent (state subscriptions keep only the newest).",
)
PUSHES_DROPPED = Counter(
    "mediagraph_subscription_pushes_dropped_total",
    "Subscription events dropped: a subscriber's mailbox was full, or its socket had failed.",
)

WORKER_BACKLOG = Gauge(
    "mediagraph_worker_backlog",
    "Entries a background worker has still to process (pending views, unsynced counts, stream entries, log rows).",
    ["worker", "queue"],
    multiprocess_mode="mostrecent",
)
WORKER_LAG_SECONDS = Gauge(
    "mediagraph_worker_lag_seconds",
    "Age of the oldest entry a background worker has still to process.",
    ["worker", "queue"],
    multiprocess_mode="mostrecent",
)
WORKER_UP = Gauge(
    "mediagraph_worker_up",
    "1 while some process runs the worker (its heartbeat is fresh), else 0.",
    ["worker"],
    multiprocess_mode="mostrecent",
)
POSTGRES_CONNECTIONS = Gauge(
    "mediagraph_postgres_connections",
    "PostgreSQL connections held by this process's pools, by database, pool (orm, reads) and state (in_use, idle).",
    ["database", "pool", "state"],
    multiprocess_mode="livesum",
)
REDIS_CONNECTIONS = Gauge(
    "mediagraph_redis_connections",
    "Redis connections of this process's command pool, by state (in_use, idle).",
    ["state"],
    multiprocess_mode="livesum",
)
POSTGRES_ERRORS = Counter(
    "mediagraph_postgres_errors_total",
    "Failed PostgreSQL statements and connections, by database and kind (connection, statement).",
    ["database", "kind"],
)
REDIS_ERRORS = Counter(
    "mediagraph_redis_errors_total", "Redis commands that failed to reach Redis or timed out, by kind.", ["kind"]
)


class OperationNames:
    """Operation names as label values: bounded, so clients cannot grow the label set at will."""

    def __init__(self, limit: int = DEFAULT_OPERATION_NAMES) -> None:
        self.limit = limit
        self._admitted: set[str] = set()

    def label(self, name: str | None) -> str:
        if name is None:
            return ANONYMOUS
        if name in self._admitted:
            return name
        if len(self._admitted) >= self.limit:
            return OTHER
        self._admitted.add(name)
        return name


_error_codes: dict[str, Any] = {}
_execution_paths = {path: EXECUTIONS.labels(path) for path in ("plan", "graphql_core")}
_document_cache = {result: DOCUMENT_CACHE.labels(result) for result in ("hit", "miss")}
_persisted = {result: PERSISTED_QUERIES.labels(result) for result in ("hit", "miss")}


def count_error_codes(codes: Iterable[object]) -> None:
    for code in codes:
        counter = _error_codes.get(code) if isinstance(code, str) else None
        (counter or _error_counter(code)).inc()


def _error_counter(code: object) -> Any:
    if isinstance(code, str) and ERROR_CODE.match(code) and len(_error_codes) < MAX_ERROR_CODES:
        counter = _error_codes[code] = ERRORS.labels(code)
        return counter
    return ERRORS.labels(OTHER.upper())


def count_response_errors(errors: Iterable[dict[str, Any]]) -> None:
    """Count a response's formatted errors by their `extensions.code`."""
    count_error_codes((error.get("extensions") or {}).get("code", "INTERNAL_SERVER_ERROR") for error in errors)


def count_execution(planned: bool) -> None:
    _execution_paths["plan" if planned else "graphql_core"].inc()


def count_document_cache(hit: bool) -> None:
    _document_cache["hit" if hit else "miss"].inc()


def count_persisted_query(hit: bool) -> None:
    _persisted["hit" if hit else "miss"].inc()


def count_postgres_error(database: str, error: BaseException, *, disconnect: bool) -> None:
    """Count a failed statement or connection; constraint violations are answers (CONFLICT), not failures."""
    state = _sqlstate(error)
    if state is not None and state.startswith("23"):
        return
    if disconnect or isinstance(error, OSError | ConnectionError):
        kind = "connection"
    elif state == "57014" or isinstance(error, TimeoutError):
        kind = "timeout"
    else:
        kind = "statement"
    POSTGRES_ERRORS.labels(database, kind).inc()


def _sqlstate(error: BaseException | None) -> str | None:
    for candidate in (error, getattr(error, "orig", None), getattr(error, "__cause__", None)):
        state = getattr(candidate, "sqlstate", None) or getattr(candidate, "pgcode", None)
        if isinstance(state, str):
            return state
    return None


def count_redis_error(kind: str) -> None:
    REDIS_ERRORS.labels(kind).inc()


@dataclass(frozen=True)
class Lag:
    """How far one background worker's queue is behind: entries waiting, and the oldest one's age."""

    worker: str
    queue: str
    entries: int | None = None
    seconds: float | None = None


def record_lags(lags: Iterable[Lag]) -> None:
    for lag in lags:
        if lag.entries is not None:
            WORKER_BACKLOG.labels(lag.worker, lag.queue).set(lag.entries)
        if lag.seconds is not None:
            WORKER_LAG_SECONDS.labels(lag.worker, lag.queue).set(lag.seconds)


def record_workers_up(up: dict[str, bool]) -> None:
    for worker, running in up.items():
        WORKER_UP.labels(worker).set(1 if running else 0)


def record_postgres_pool(database: str, pool: str, in_use: int, idle: int) -> None:
    POSTGRES_CONNECTIONS.labels(database, pool, "in_use").set(in_use)
    POSTGRES_CONNECTIONS.labels(database, pool, "idle").set(idle)


def record_redis_pool(in_use: int, idle: int) -> None:
    REDIS_CONNECTIONS.labels("in_use").set(in_use)
    REDIS_CONNECTIONS.labels("idle").set(idle)
