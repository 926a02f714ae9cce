"""The worker's side of a run's trace: every call made for an attempt, and its task, are in
the run's trace. The task gets TRACEPARENT (W3C), and the attempt's calls send `traceparent`,
so the server's report spans continue the run's trace. With FENCELINE_OTEL=1 or
OTEL_EXPORTER_OTLP_ENDPOINT and the `fenceline[otel]` extra, the attempt is a span and its
HTTP calls are child spans (httpx instrumentation); without, the header is all there is.

app.telemetry.tracing and app.telemetry.traceparent import only the standard library at module level: the worker
still needs nothing of the server.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from app.telemetry.traceparent import traceparent, w3c_trace_id
from app.telemetry.tracing import remote_parent, start_provider, wanted

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

    HTTPXClientInstrumentor().instrument()
    _tracer = trace.get_tracer("fenceline.worker")


@contextmanager
def attempt(correlation: dict[str, Any]) -> Iterator[str]:
    """Within it, this thread's calls are in the run's trace; answers the task's TRACEPARENT."""
    trace_id = w3c_trace_id(str(correlation.get("trace_id") or ""))
    if _tracer is None:
        value = traceparent(trace_id)
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
    with _tracer.start_as_current_span("fenceline.worker.attempt", attributes=attributes,
                                       context=trace.set_span_in_context(remote_parent(trace_id))) as span:
        value = traceparent(trace_id, format(span.get_span_context().span_id, "016x"))
        token = current.set(value)
        try:
            yield value
        finally:
            current.reset(token)
