"""What every request leaves behind (contract 8): its request id, its metrics and its log line.

A pure ASGI layer (no BaseHTTPMiddleware: no extra task or body copy per request). The request
id is the client's `X-Request-ID` when it matches `[A-Za-z0-9._-]{1,128}`, else a fresh one, and
is echoed on the answer. An incoming W3C `traceparent` names the request's trace: its trace id
is logged, and a run created in that request takes it as its trace_id (app/orchestration). The
route is the matched route's template, never the raw path, so label values stay bounded. A
route that waited for something to happen (a waiting claim waiting for work) says how long in
the request's state, `waited_seconds`: that time is not the request's latency, and is measured
apart (fenceline_claim_wait_seconds). A request the application returned from without
answering is one whose client left before it could be answered (the ingress returns so when a
client leaves mid-body): its status is CLIENT_LEFT, nginx's 499, not a 5xx that would page
someone.
"""

import logging
import re
import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.telemetry.logconfig import incoming_trace_id, request_id
from app.telemetry.metrics import http_request_duration, http_requests
from app.telemetry.traceparent import trace_id_of

REQUEST_ID_HEADER = b"x-request-id"
REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")
UNMATCHED = "unmatched"
CLIENT_LEFT = 499

access_log = logging.getLogger("fenceline.access")


def route_of(scope: Scope) -> str:
    """The matched route's template (`/v1/runs/{dag_id}/{run_id}`), set in the scope by routing."""
    route = scope.get("route")
    return getattr(route, "path", None) or UNMATCHED


def attempt_fields(scope: Scope) -> dict[str, Any]:
    """The attempt identity the request's credential named, as app/auth/deps.py left it."""
    state = scope.get("state")
    return state.get("log_identity", {}) if isinstance(state, dict) else {}


def waited(scope: Scope) -> float:
    """The seconds the route said it waited for something to happen (a long poll)."""
    state = scope.get("state")
    return state.get("waited_seconds", 0.0) if isinstance(state, dict) else 0.0


class Observe:
    """Request id, metrics and the access log line of every HTTP request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        rid = trace = None
        for name, value in scope["headers"]:
            if name == REQUEST_ID_HEADER:
                rid = value.decode("latin-1")
            elif name == b"traceparent":
                trace = trace_id_of(value.decode("latin-1"))
        if rid is None or not REQUEST_ID.fullmatch(rid):
            rid = uuid.uuid4().hex
        rid_token, trace_token = request_id.set(rid), incoming_trace_id.set(trace)
        status: int | None = None
        echoed = rid.encode()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), (REQUEST_ID_HEADER, echoed)]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
            status = status or CLIENT_LEFT
        finally:
            status = status or 500  # what the client gets if the application fails before answering
            elapsed = time.perf_counter() - started
            method, route = scope["method"], route_of(scope)
            code = str(status)
            http_requests.labels(method, route, code).inc()
            http_request_duration.labels(method, route, code).observe(elapsed - waited(scope))
            if access_log.isEnabledFor(logging.INFO):
                access_log.info("%s %s %s %.1fms", method, scope["path"], code, elapsed * 1000, extra={
                    "method": method, "path": scope["path"], "route": route, "status": status,
                    "duration_ms": round(elapsed * 1000, 3), **attempt_fields(scope)})
            request_id.reset(rid_token)
            incoming_trace_id.reset(trace_token)
