"""OpenTelemetry traces (contract 8), with the optional extra `fenceline[otel]`.

On when FENCELINE_OTEL=1 or OTEL_EXPORTER_OTLP_ENDPOINT is set (the exporter reads the standard
OTEL_* variables). Requests (FastAPI), database calls (SQLAlchemy) and the worker's HTTP calls
(httpx) are spans (not the ASGI layer's receive and send); an incoming `traceparent` is
continued. A run's trace is one tree:

- its root, `fenceline.run`, is exported when the run is created: a child of the creating
  request's span when the run is in that request's trace, else the root of the run's trace.
  Its span id is derived from the run (traceparent.run_span_id), so no one has to ask for it;
- a claim's span (`fenceline.claim`) is a child of it when the claim hands out tasks of one
  run; a claim of several runs' tasks is in the request's trace, linked to each run's root;
- the reference worker's attempt span is a child of it, and its calls (named by route) and
  the task's TRACEPARENT are children of the attempt; an agent's reports continue whatever
  traceparent it sends: as a request's header, or as the `traceparent` member of a batch's
  entry (`fenceline.batch.<op>`, a span of its own for each entry that carries one).

The run root gets its derived ids through the provider's id generator (RunIds wraps it: an
extension point of the SDK, used by vendors' id formats). Without the extra, none of this is
imported.
"""

import logging
import os
import time
from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any

from app.telemetry.logconfig import incoming_trace_id
from app.telemetry.traceparent import parent_of, run_span_id, w3c_trace_id

log = logging.getLogger("fenceline.tracing")
BATCH_OPS = ("heartbeat", "report", "log")  # what a batch entry may be (POST /v1/attempts/batch)
_tracer: Any = None  # set once tracing is on in this process
_forced: ContextVar[tuple[int, int] | None] = ContextVar("fenceline_forced_span_ids", default=None)


def batch_op(entry: dict[str, Any]) -> str:
    """A batch entry's op as its metrics and its span name it: one of BATCH_OPS, else `invalid`
    (the client's text never names a series or a span)."""
    op = entry.get("op")
    return op if op in BATCH_OPS else "invalid"


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
        from opentelemetry.sdk.trace.id_generator import IdGenerator
    except ImportError:
        log.warning("tracing is on (FENCELINE_OTEL or OTEL_EXPORTER_OTLP_ENDPOINT) but OpenTelemetry is not "
                    "installed: pip install 'fenceline[otel]'")
        return False
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)

    class RunIds(IdGenerator):
        """The provider's ids, but those a run root is made with (`forced`)."""

        fenceline_run_ids = True

        def __init__(self, ids: IdGenerator) -> None:
            self.ids = ids

        def generate_trace_id(self) -> int:
            forced = _forced.get()
            return forced[0] if forced else self.ids.generate_trace_id()

        def generate_span_id(self) -> int:
            forced = _forced.get()
            return forced[1] if forced else self.ids.generate_span_id()

    if not getattr(provider.id_generator, "fenceline_run_ids", False):  # once per provider
        provider.id_generator = RunIds(provider.id_generator)
    _tracer = provider.get_tracer("fenceline")
    return True


def instrument_app(app: Any, engine: Any) -> None:
    """Spans for the application's requests and its database calls."""
    if not start_provider("fenceline"):
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer
    from opentelemetry.metrics import get_meter

    FastAPIInstrumentor.instrument_app(app, excluded_urls="health,metrics", exclude_spans=["receive", "send"])
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


def remote_parent(trace_id: str, span_id: str) -> Any:
    """The span `span_id` of `trace_id` (W3C forms), recorded elsewhere (a run's root)."""
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    return NonRecordingSpan(SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True,
                                        trace_flags=TraceFlags(TraceFlags.SAMPLED)))


def run_root(run_trace_id: str, dag_id: str, run_id: str) -> Any:
    """The run's root span (`fenceline.run`), as a parent."""
    trace_id = w3c_trace_id(run_trace_id)
    return remote_parent(trace_id, run_span_id(trace_id, dag_id, run_id))


def run_created(run_trace_id: str, dag_id: str, run_id: str) -> None:
    """Export the run's root span: a child of the request's span when the run is in the
    request's trace, else the root of the run's own trace."""
    if _tracer is None:
        return
    from opentelemetry import trace
    from opentelemetry.context import Context

    root = run_root(run_trace_id, dag_id, run_id).get_span_context()
    request = trace.get_current_span()
    in_request = request.get_span_context().is_valid and request.get_span_context().trace_id == root.trace_id
    token = _forced.set((root.trace_id, root.span_id))
    try:
        span = _tracer.start_span("fenceline.run", context=trace.set_span_in_context(request) if in_request
                                  else Context(), attributes={"fenceline.dag_id": dag_id, "fenceline.run_id": run_id})
    finally:
        _forced.reset(token)
    span.end()


def claimed(started: int | None, runs: Iterable[tuple[str, str, str]], attributes: dict[str, Any]) -> None:
    """The claim's span, of the claimed tasks' `runs` (trace_id, dag_id, run_id): a child of the
    run's root when they are of one run, else in the request's trace, linked to each run's
    root; linked to the request's span either way."""
    roots = sorted(set(runs))
    if _tracer is None or started is None or not roots:
        return
    from opentelemetry import trace
    from opentelemetry.trace import Link

    request = trace.get_current_span().get_span_context()
    links = [Link(request)] if request.is_valid else []
    if len(roots) == 1:
        context = trace.set_span_in_context(run_root(*roots[0]))
    else:
        context, links = None, [*links, *(Link(run_root(*r).get_span_context()) for r in roots)]
    span = _tracer.start_span("fenceline.claim", context=context, links=links, start_time=started,
                              attributes={**attributes, "fenceline.claim.runs": len(roots)})
    span.end()


def batch_entries(started: int | None, entries: list[dict[str, Any]], statuses: list[int]) -> None:
    """A span for each batch entry that carries a `traceparent` (its attempt's, as its single
    request's header would): `fenceline.batch.<op>`, a child of that parent, so a batched report
    is in its run's trace as a single one is; linked to the batch request's span, and spanning
    the batch's time in the server (its entries are applied together). Entries without one, with an
    invalid one (ignored, as the header is) or with one not sampled (as the header's parent
    would not be) make no span; an entry whose op is none of BATCH_OPS is named `invalid`."""
    if _tracer is None or started is None:
        return
    from opentelemetry import trace
    from opentelemetry.trace import Link

    request = trace.get_current_span().get_span_context()
    links = [Link(request)] if request.is_valid else []
    ended = time.time_ns()
    for entry, status in zip(entries, statuses, strict=True):
        if (parent := parent_of(entry.get("traceparent"), sampled=True)) is None:
            continue
        op = batch_op(entry)
        span = _tracer.start_span(f"fenceline.batch.{op}", context=trace.set_span_in_context(remote_parent(*parent)),
                                  links=links, start_time=started,
                                  attributes={"fenceline.batch.op": str(op), "fenceline.batch.status": status})
        span.end(end_time=ended)
