"""Who may read /metrics and where, and the text a scrape gets.

Where /metrics answers:
- `MEDIAGRAPH_METRICS_PORT` set: only on that port (a listener of its own in every
  server process, so it can stay off the public network); the main port has no /metrics.
- else `MEDIAGRAPH_METRICS_TOKEN` set: on the main port, to `Authorization: Bearer <token>`.
- else in development: on the main port, to anyone.
- else (production with neither): nowhere, and startup says so.
With both a port and a token, the port also asks for the token.

With several server processes each writes its values under PROMETHEUS_MULTIPROC_DIR,
which `serve --processes N` creates before starting them; a scrape of any process then
reads every process's files, so one scrape sees the whole server.
"""

from __future__ import annotations

import hmac
import os
import shutil
import tempfile
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from mediagraph.settings import Settings

MULTIPROCESS_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


class Exposure(StrEnum):
    OPEN = "open on the main port"
    TOKEN = "on the main port, with the bearer token"
    PORT = "on the metrics port"
    OFF = "off"


@dataclass(frozen=True)
class MetricsAccess:
    exposure: Exposure
    token: str | None = None
    port: int | None = None

    @classmethod
    def of(cls, settings: Settings) -> MetricsAccess:
        token = settings.metrics_token or None
        if settings.metrics_port is not None:
            return cls(Exposure.PORT, token=token, port=settings.metrics_port)
        if token is not None:
            return cls(Exposure.TOKEN, token=token)
        if settings.environment == "production":
            return cls(Exposure.OFF)
        return cls(Exposure.OPEN)

    @property
    def enabled(self) -> bool:
        return self.exposure is not Exposure.OFF

    def serves_on(self, local_port: int | None) -> bool:
        """Whether a request that arrived on `local_port` may see /metrics at all."""
        if self.exposure is Exposure.OFF:
            return False
        if self.exposure is Exposure.PORT:
            return local_port == self.port
        return True

    def admits(self, authorization: str | None) -> bool:
        if self.token is None:
            return True
        scheme, _, credentials = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), self.token.encode())

    def describe(self) -> str:
        if self.exposure is Exposure.OFF:
            return "metrics: /metrics is off (production without MEDIAGRAPH_METRICS_TOKEN or MEDIAGRAPH_METRICS_PORT)"
        if self.exposure is Exposure.PORT:
            return f"metrics: /metrics on port {self.port}" + (" with the bearer token" if self.token else "")
        return f"metrics: /metrics {self.exposure.value}"


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROCESS_VARIABLE) or None


def render() -> bytes:
    """The Prometheus text of every metric: this process's, or every server process's in multiprocess mode."""
    folder = multiprocess_dir()
    if folder is None:
        return generate_latest(REGISTRY)
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=folder)  # type: ignore[no-untyped-call]
    return generate_latest(registry)


class MultiprocessFolder:
    """The folder a group of server processes shares its metrics through; the parent owns it.

    Set in the environment before the processes start, so each imports prometheus-client
    in multiprocess mode. A folder the operator already set (PROMETHEUS_MULTIPROC_DIR) is
    used as it is and left in place.
    """

    def __init__(self) -> None:
        existing = multiprocess_dir()
        self.owned = existing is None
        self.path = Path(existing or tempfile.mkdtemp(prefix="mediagraph-metrics-"))
        os.environ[MULTIPROCESS_VARIABLE] = str(self.path)

    def remove(self) -> None:
        if self.owned:
            os.environ.pop(MULTIPROCESS_VARIABLE, None)
            shutil.rmtree(self.path, ignore_errors=True)
