"""The launcher's own metrics, served at /metrics on --metrics-port: what only a launcher sees,
the Pods of a task instance's attempts side by side (contract 9.5). The server's metrics are
the server's (app/telemetry/metrics.py); this registry holds the launcher's alone."""

from prometheus_client import CollectorRegistry, Histogram, start_http_server

REGISTRY = CollectorRegistry()
attempt_overlap = Histogram(
    "fenceline_attempt_overlap_seconds",
    "For each Pod the launcher created, how long a Pod of an earlier attempt of its task instance still ran "
    "beside it, from its creation: 0 when every earlier Pod had stopped first.",
    buckets=(0.0, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0), registry=REGISTRY,
)


def serve(port: int) -> None:
    """/metrics on every interface at `port`, from a thread of its own."""
    start_http_server(port, registry=REGISTRY)
