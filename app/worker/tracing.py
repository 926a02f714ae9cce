"""The worker's side of a run's trace: every call made for an attempt, and its task, are in
the run's trace. The task gets TRACEPARENT (W3C), and the attempt's calls send `traceparent`,
so the server's report spans continue the run's trace. With FENCELINE_OTEL=1 or
OTEL_EXPORTER_OTLP_ENDPOINT and the `fenceline[otel]` extra, the attempt is a span, a child of
the run's root (app/telemetry/tracing.py), and its HTTP calls are child spans named by method
and route (httpx instrumentation); without, the header names the run's root as the parent.

app.telemetry.tracing and app.telemetry.traceparent import only the standard library at module level: the worker
still needs nothing of the server.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from app.telemetry.traceparent import run_traceparent, traceparent, w3c_trace_id
from app.telemetry.tracing import run_root, start_provider, wanted

ROUTE = "fenceline.route"  # a request's extension: its route template, when its path has values in it

# The traceparent the current thread's calls send (set for the duration of one attempt).
current: ContextVar[str | None] = ContextVar("fenceline_worker_traceparent", default=None)
_tracer: Any = None


def start() -> None:
    """Tracing for this worker process, when it is wanted and the extra is installed."""
    global _tracer
    if not wanted(os.environ.get("FENCELINE_OTEL", "").lower() in ("1", "true", "yes")):
        return
    if not start_provider("fenceline-worker"):
        return
    from opentelemetry import trace
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    HTTPXClientInstrumentor().instrument(request_hook=_name_call)
    _tracer = trace.get_tracer("fenceline.worker")


def _name_call(span: Any, request: Any) -> None:
    """A call's span named by method and route (`POST /v1/attempts/report`), not by method alone."""
    method = request.method.decode() if isinstance(request.method, bytes) else str(request.method)
    span.update_name(f"{method} {(request.extensions or {}).get(ROUTE) or request.url.path}")


@contextmanager
def attempt(correlation: dict[str, Any]) -> Iterator[str]:
    """Within it, this thread's calls are in the run's trace; answers the task's TRACEPARENT."""
    if _tracer is None:
        value = run_traceparent(correlation)
        token = current.set(value)
        try:
            yield value
        finally:
            current.reset(token)
        return
    from opentelemetry import trace

    attributes = {"fenceline.ti_id": str(correlation.get("ti_id")),
                  "fenceline.try_number": correlation.get("try_number", 0),
                  "fenceline.attempt_epoch": correlation.get("attempt_epoch", 0)}
    root = run_root(str(correlation.get("trace_id") or ""), str(correlation.get("dag_id")),
                    str(correlation.get("run_id")))
    with _tracer.start_as_current_span("fenceline.worker.attempt", attributes=attributes,
                                       context=trace.set_span_in_context(root)) as span:
        value = traceparent(w3c_trace_id(str(correlation.get("trace_id") or "")),
                            format(span.get_span_context().span_id, "016x"))
        token = current.set(value)
        try:
            yield value
        finally:
            current.reset(token)
