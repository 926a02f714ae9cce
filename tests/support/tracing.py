"""Spans caught in this process: OpenTelemetry's in-memory exporter on the process's tracer
provider, which the server's spans and the tests read."""

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

EXPORTER = InMemorySpanExporter()
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def catch_spans() -> None:
    """Set the process's tracer provider to one exporting to EXPORTER (once per process, as
    OpenTelemetry allows)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
