"""The server's and the worker's log lines: plain text by default, JSON lines by setting
(`FENCELINE_LOG_FORMAT=json`). docs/operations.md lists the fields."""

import json
import logging
import logging.config
import traceback
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

# Fields a record may carry (given as `extra=`) that a JSON line names; everything else of a
# LogRecord is logging's own bookkeeping.
FIELDS = ("method", "path", "route", "status", "duration_ms", "ti_id", "try_number", "attempt_epoch",
          "execution_id", "trace_id")
FORMATS = ("plain", "json")
PLAIN = "%(asctime)s %(levelname)s %(name)s %(message)s"


# Set by app/telemetry/observe.py for the duration of a request.
request_id: ContextVar[str | None] = ContextVar("fenceline_request_id", default=None)
incoming_trace_id: ContextVar[str | None] = ContextVar("fenceline_trace_id", default=None)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: timestamp (UTC, RFC 3339), level, logger, message, the
    request id and the request's trace id when the line was logged within a request, and the
    fields of FIELDS the record carries.

    Not python-json-logger's formatter: it names every `extra` a record carries but those it is
    told to skip (uvicorn's `color_message` would reach each line), where this one names FIELDS only."""

    def __init__(self, static: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.static = static or {}

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage(),
            **self.static,
        }
        if (rid := request_id.get()) is not None:
            line["request_id"] = rid
        if (trace := incoming_trace_id.get()) is not None:
            line["trace_id"] = trace
        for name in FIELDS:
            if (value := record.__dict__.get(name)) is not None:
                line[name] = value if isinstance(value, int | float | bool) else str(value)
        if record.exc_info:
            line["exception"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        return json.dumps(line, ensure_ascii=False)


class PlainFormatter(logging.Formatter):
    """The default: a readable line, the request id appended when there is one."""

    def __init__(self, static: dict[str, Any] | None = None) -> None:
        super().__init__(PLAIN.replace(" ", "".join(f" {k} {v}" for k, v in (static or {}).items()) + " ", 1))

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        rid = request_id.get()
        return text if rid is None else f"{text} request_id={rid}"


def formatter(log_format: str, **static: Any) -> logging.Formatter:
    return (JsonFormatter if log_format == "json" else PlainFormatter)(static)


def dict_config(log_format: str, level: str = "info") -> dict[str, Any]:
    """The logging configuration of a server process (fenceline's, uvicorn's and SQLAlchemy's
    loggers to one handler on stderr, in `log_format`), as uvicorn applies it in each worker
    process too."""
    factory = f"{__name__}.{'JsonFormatter' if log_format == 'json' else 'PlainFormatter'}"
    return {
        "version": 1, "disable_existing_loggers": False,
        "formatters": {"line": {"()": factory}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "line", "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["stderr"], "level": level.upper()},
        # uvicorn's loggers propagate to the root's handler; its access log is replaced by
        # fenceline.access (app/telemetry/observe.py), which knows the route, request id and attempt.
        "loggers": {"uvicorn": {"handlers": [], "propagate": True},
                    "uvicorn.error": {"handlers": [], "propagate": True},
                    "uvicorn.access": {"handlers": [], "propagate": False, "level": "WARNING"},
                    "alembic": {"level": "WARNING"}},  # `fenceline migrate` says what it did
    }


def configure(log_format: str, level: str = "info") -> None:
    logging.config.dictConfig(dict_config(log_format, level))


def sayer(log_format: str) -> Callable[[str], None]:
    """How the server tells its operator something at start (where it keeps its data, where a
    generated password is): a `fenceline: …` line on stdout, or a JSON line like every other."""
    if log_format == "json":
        return logging.getLogger("fenceline").info
    return lambda message: print(f"fenceline: {message}", flush=True)
