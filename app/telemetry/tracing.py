"""OpenTelemetry traces (contract 8), with the optional extra `fenceline[otel]`.

On when FENCELINE_OTEL=1 or OTEL_EXPORTER_OTLP_ENDPOINT is set (the exporter reads the standard
OTEL_* variables). Requests (FastAPI), database calls (SQLAlchemy) and the worker's HTTP calls
(httpx) are spans; an incoming `traceparent` is continued. A run's trace is that of its tasks'
claims and reports: the claim span is made in the run's trace (app/telemetry/traceparent.py), or, for a
claim that hands out tasks of several runs, in the request's trace with a link to each run's;
an agent's reports continue the run's trace from the traceparent it sends (the reference worker
sends it, and hands TRACEPARENT to the task). Without the extra, none of this is imported.
"""

import logging
import os
import time
from typing import Any

from app.telemetry.logconfig import incoming_trace_id
from app.telemetry.traceparent import w3c_trace_id

log = logging.getLogger("fenceline.tracing")
_tracer: Any = None  # set once tracing is on in this process


def wanted(otel_setting: bool) -> bool:
    return otel_setting or bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def start_provider(service_name: str) -> bool:
    """The process's tracer provider: one already set (a test's, an operator's
    opentelemetry-instrument) is kept; else an SDK provider exporting by OTLP over HTTP. False
    when the extra is not installed (said once)."""
    global _tracer
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("tracing is on (FENCELINE_OTEL or OTEL_EXPORTER_OTLP_ENDPOINT) but OpenTelemetry is not "
                    "installed: pip install 'fenceline[otel]'")
        return False
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
    _tracer = trace.get_tracer("fenceline")
    return True


def instrument_app(app: Any, engine: Any) -> None:
    """Spans for the application's requests and its database calls."""
    if not start_provider("fenceline"):
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer
    from opentelemetry.metrics import get_meter

    FastAPIInstrumentor.instrument_app(app, excluded_urls="health,metrics")
    usage = get_meter("fenceline.db").create_up_down_counter("db.client.connections.usage")
    EngineTracer(_tracer, engine, usage)  # this engine only: a per-engine tracer, not a global patch


def current_trace_id() -> str | None:
    """The trace the current request belongs to: its span's, else the incoming traceparent's."""
    if _tracer is not None:
        from opentelemetry import trace

        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            return format(context.trace_id, "032x")
    return incoming_trace_id.get()


def now() -> int | None:
    """A start time for a span made once the work is known (None when tracing is off: free)."""
    return time.time_ns() if _tracer is not None else None


def remote_parent(trace_id: str) -> Any:
    """A parent in `trace_id` (W3C form) that no span of this process recorded."""
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    return NonRecordingSpan(SpanContext(int(trace_id, 16), int(trace_id[16:], 16) or 1, is_remote=True,
                                        trace_flags=TraceFlags(TraceFlags.SAMPLED)))


def claimed(started: int | None, run_trace_ids: list[str], attributes: dict[str, Any]) -> None:
    """The claim's span: in the run's trace when its tasks are of one run, else in the
    request's trace, linked to each run's trace; linked to the request's span either way."""
    if _tracer is None or started is None or not run_trace_ids:
        return
    from opentelemetry import trace
    from opentelemetry.trace import Link

    traces = sorted({w3c_trace_id(t) for t in run_trace_ids})
    request = trace.get_current_span().get_span_context()
    links = [Link(request)] if request.is_valid else []
    if len(traces) == 1:
        context = trace.set_span_in_context(remote_parent(traces[0]))
    else:
        context, links = None, [*links, *(Link(remote_parent(t).get_span_context()) for t in traces)]
    span = _tracer.start_span("fenceline.claim", context=context, links=links, start_time=started,
                              attributes={**attributes, "fenceline.claim.runs": len(traces)})
    span.end()
