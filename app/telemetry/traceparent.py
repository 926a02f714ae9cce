"""W3C trace context, as the server and the worker both read and write it (standard library
only: the worker imports nothing else of the server).

A run's `trace_id` is any `[A-Za-z0-9-]{1,64}` a client chose, or the trace it was created in.
Its W3C form is itself when it is 32 lowercase hex digits (not all zero), else the first 32 hex
digits of its SHA-256: the same on the server (the claim's span) and on the worker (the
TRACEPARENT it hands the task), with no call between them.
"""

import hashlib
import re
import secrets

TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
TRACE_ID = re.compile(r"[0-9a-f]{32}")


def parent_of(traceparent: object, *, sampled: bool = False) -> tuple[str, str] | None:
    """The (trace id, span id) a W3C traceparent (version 00) names, if it is a valid one and,
    when `sampled`, its flags ask for its trace to be recorded (W3C `sampled`)."""
    match = TRACEPARENT.fullmatch(traceparent) if isinstance(traceparent, str) else None
    if match is None or match.group(1) == "0" * 32 or match.group(2) == "0" * 16 \
            or (sampled and not int(match.group(3), 16) & 1):
        return None
    return match.group(1), match.group(2)


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id a W3C traceparent (version 00) names, if it is a valid one."""
    parent = parent_of(traceparent)
    return parent[0] if parent else None


def w3c_trace_id(run_trace_id: str) -> str:
    """The W3C trace id (32 hex digits) of a run's trace_id."""
    if TRACE_ID.fullmatch(run_trace_id) and run_trace_id != "0" * 32:
        return run_trace_id
    return hashlib.sha256(run_trace_id.encode()).hexdigest()[:32]


def run_span_id(trace_id: str, dag_id: str, run_id: str) -> str:
    """The span id of a run's root span (`fenceline.run`, exported by the server when the run is
    created), from the run's W3C trace id and its key: claims and the worker's attempts name it
    as their parent with no call between them."""
    return hashlib.sha256(f"{trace_id}/{dag_id}/{run_id}".encode()).hexdigest()[:15] + "1"  # never all zero


def run_traceparent(correlation: dict[str, object]) -> str:
    """The traceparent of an attempt's run root, from its claim's correlation."""
    trace_id = w3c_trace_id(str(correlation.get("trace_id") or ""))
    return traceparent(trace_id, run_span_id(trace_id, str(correlation.get("dag_id")), str(correlation.get("run_id"))))


def traceparent(trace_id: str, span_id: str | None = None) -> str:
    """A sampled traceparent in `trace_id` (a fresh parent span id unless given)."""
    return f"00-{trace_id}-{span_id or secrets.token_hex(8)}-01"
