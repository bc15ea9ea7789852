"""What happens when a GraphQL operation finishes: its latency recorded, and a log line if it was slow.

Both request paths (the JSON fast path and Strawberry's view) report to the schema's
one `OperationReporter`, so an operation is measured the same way whichever path
served it.
"""

from __future__ import annotations

import logging
from typing import Any

from mediagraph.observability.metrics import ANONYMOUS, OPERATION_SECONDS, OperationNames
from mediagraph.settings import Settings

log = logging.getLogger("mediagraph.operations")


class OperationReporter:
    def __init__(self, settings: Settings) -> None:
        self.names = OperationNames(settings.metrics_operation_names)
        # Operations slower than this are logged (with their request id); 0 logs every one.
        self.slow_seconds = settings.log_slow_operation_seconds
        self._histograms: dict[tuple[str, str], Any] = {}

    def finished(self, operation_type: str, name: str | None, seconds: float, *, errors: int = 0) -> None:
        key = (operation_type, self.names.label(name))
        histogram = self._histograms.get(key)
        if histogram is None:
            histogram = self._histograms[key] = OPERATION_SECONDS.labels(*key)
        histogram.observe(seconds)
        if seconds >= self.slow_seconds:
            log.log(
                logging.INFO if self.slow_seconds == 0 else logging.WARNING,
                "%s %s took %.1f ms%s",
                operation_type,
                name or ANONYMOUS,
                seconds * 1000,
                f" ({errors} errors)" if errors else "",
            )
