"""What every request passes before routing, parsing or any token check (contract 7).

Before any of a body is read, the request's headers are put to its route (the `gate`, which the
application hands in): a route that needs a bearer token answers a missing or invalid one at
once (401 or 403, as the route itself would) and the connection is closed, so a stranger's body
costs no memory. A route that takes no token, or HTTP Basic (a login, Airflow 2's API), holds
the body of a caller without a valid bearer token to UNVERIFIED_BYTES.

The body is then counted as it arrives, Content-Length or chunked, and refused with 413 as soon
as it passes its route's limit: nothing past the limit is held in memory, and the connection is
closed rather than read to the end. A route whose limit is larger than the default (a run, a
log append, a snapshot) gets it only for a caller whose token the route accepts. A body must
arrive within `body_seconds` of its head, plus one second for each BODY_MIN_RATE bytes that
arrived (a slow but steady upload of a large body goes on): else 408 and the connection is
closed. A client that leaves before its body has arrived gets no answer (logged 499 by
app/telemetry/observe.py). A large body is parsed in a worker thread, never on the event loop,
and its parsed value kept in the scope (PARSED_JSON) for a route that would otherwise parse it
again.

A JSON body is refused with 422 if no route may take it: text that is not UTF-8, numbers that
are not finite (`1e400`, `NaN`), or nesting deeper than the whole-body limit. Malformed JSON
(or a body that is no JSON at all) passes on to the route, which names where it broke.
"""

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.config import Settings
from app.errors import AppError
from app.web.problems import render, render_error, validation_problem
from app.web.schemas import free_form_depth, json_depth

# Room for JSON escaping around a log append's content (the setting bounds the content).
LOG_ENVELOPE = 2
# The body of a caller without a valid bearer token (a login, HTTP Basic): a login is a few
# hundred bytes, and a thousand stalled strangers then hold 64 MB at most, for `body_seconds`.
UNVERIFIED_BYTES = 64 * 1024
# A body's deadline moves one second later for each this many bytes that arrived.
BODY_MIN_RATE = 64 * 1024


@dataclass(frozen=True)
class Limits:
    """The body limit of every route (by method and path, else `default_bytes`; the larger ones
    for a caller whose token the route accepts), the time a body has to arrive, and the JSON
    nesting limits of a whole body and of a free-form field."""

    default_bytes: int
    route_bytes: dict[tuple[str, str], int]
    body_seconds: float
    body_depth: int
    free_form_depth: int

    @classmethod
    def from_settings(cls, settings: Settings) -> "Limits":
        return cls(settings.max_request_bytes, {
            ("POST", "/v1/runs"): settings.run_max_request_bytes,
            ("POST", "/v1/admin/snapshot"): settings.snapshot_max_request_bytes,
            ("POST", "/v1/attempts/logs"): LOG_ENVELOPE * settings.log_max_request_bytes + 1024,
            # A batch carries up to 500 entries' tokens and, together, one append's worth of log.
            ("POST", "/v1/attempts/batch"): LOG_ENVELOPE * settings.log_max_request_bytes + 1024 * 1024,
        }, settings.request_body_timeout_seconds, settings.max_json_depth, settings.max_free_form_depth)

    def body_bytes(self, scope: Scope, admission: "Admission") -> tuple[int, bool]:
        """The limit of this request's body, and whether it is lower only because the caller
        showed no token the route accepts: the default for a caller the route refuses (413 comes
        before 401), UNVERIFIED_BYTES for one it lets in without (a login, HTTP Basic)."""
        limit = self.route_bytes.get((scope["method"], scope["path"]), self.default_bytes)
        if admission.verified:
            return limit, False
        cap = self.default_bytes if admission.refusal is not None else min(self.default_bytes, UNVERIFIED_BYTES)
        return (cap, True) if limit > cap else (limit, False)


@dataclass(frozen=True)
class Admission:
    """What a request's headers earn its body, decided before any of it is read: the route's
    refusal of them (answered instead of reading the body), or whether they carry a token the
    route accepts."""

    refusal: AppError | None = None
    verified: bool = False


# The route's verdict on a request's headers (app/auth/deps.py's HeaderCheck): asked before
# any of its body is read.
Gate = Callable[[Scope], Awaitable[Admission]]
# A body this large is parsed in a worker thread (a 100 MB one took 10 s of the event loop).
PARSE_ON_LOOP_BYTES = 256 * 1024
PARSED_JSON = "fenceline.json"  # the scope's key of a body the ingress parsed (a JSON value)
_UNPARSED = object()


class BadJson(ValueError):
    """JSON that parses but that no route may receive."""


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise BadJson(f"the number {text[:40]} is not finite")
    return value


def _no_constant(name: str) -> Any:
    raise BadJson(f"{name} is not a JSON number")


def check_json(body: bytes, max_depth: int) -> tuple[str | None, Any]:
    """Why `body` (JSON) may not be received, if it may not, and its value when it parsed; why
    is None also for malformed JSON (the value then _UNPARSED), which the route refuses naming
    where it broke."""
    try:
        value = json.loads(body, parse_float=_finite, parse_constant=_no_constant)
    except json.JSONDecodeError:
        return None, _UNPARSED
    except UnicodeDecodeError:
        return "the body is not UTF-8 text", _UNPARSED
    except RecursionError:
        return f"the body nests deeper than {max_depth} levels", _UNPARSED
    except ValueError as exc:  # a hook's refusal, or an integer of more digits than Python reads
        return str(exc), _UNPARSED
    if json_depth(value, max_depth) > max_depth:
        return f"the body nests deeper than {max_depth} levels", _UNPARSED
    return None, value


FORMS = (b"application/x-www-form-urlencoded", b"multipart/form-data")


def _may_be_json(headers: dict[bytes, bytes]) -> bool:
    """Every route but the dashboard's forms takes JSON (POST /auth/token whatever the body's
    declared type), so every other body is checked as JSON."""
    return headers.get(b"content-type", b"").split(b";")[0].strip().lower() not in FORMS


class Ingress:
    """The ASGI layer that bounds and checks request bodies before the application sees them."""

    def __init__(self, app: ASGIApp, limits: Limits, gate: Gate) -> None:
        self.app, self.limits, self.gate = app, limits, gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = free_form_depth.set(self.limits.free_form_depth)
        try:
            await self._http(scope, receive, send)
        finally:
            free_form_depth.reset(token)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is None and b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)  # no body
            return
        admission = await self.gate(scope)
        limit, unverified = self.limits.body_bytes(scope, admission)
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await self._too_large(scope, receive, send, limit, unverified)
            return
        if admission.refusal is not None:  # closed: the body is never read
            await _closing(render_error(Request(scope), admission.refusal))(scope, receive, send)
            return
        body = await self._read(scope, receive, send, limit, unverified)
        if body is None:
            return
        if body and _may_be_json(headers):
            if len(body) > PARSE_ON_LOOP_BYTES:
                why, value = await anyio.to_thread.run_sync(check_json, body, self.limits.body_depth)
            else:
                why, value = check_json(body, self.limits.body_depth)
            if why:
                errors = [{"loc": ["body"], "msg": why, "type": "json_invalid"}]
                response = validation_problem(Request(scope), errors, f"Invalid input at: body ({why})")
                await response(scope, receive, send)
                return
            if value is not _UNPARSED:
                scope[PARSED_JSON] = value
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, scope: Scope, receive: Receive, send: Send, limit: int, unverified: bool) -> bytes | None:
        """The whole body, or None once the request was answered (413, 408) or its client left."""
        chunks, size = [], 0
        deadline = asyncio.get_running_loop().time() + self.limits.body_seconds
        while True:
            try:
                async with asyncio.timeout_at(deadline + size / BODY_MIN_RATE):
                    message = await receive()
            except TimeoutError:
                detail = f"The body of a request to {scope['path']} did not arrive in time."
                await _closing(render(Request(scope), 408, "request-timeout", "Request timeout", detail))(
                    scope, receive, send)
                return None
            if message["type"] != "http.request":
                return None  # the client left before sending its body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._too_large(scope, receive, send, limit, unverified)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    @staticmethod
    async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int, unverified: bool) -> None:
        without = " without a valid token of a caller it accepts" if unverified else ""
        response = render(Request(scope), 413, "payload-too-large", "Payload too large",
                          f"A request to {scope['path']} carries at most {limit} bytes{without}.")
        await _closing(response)(scope, receive, send)


def _closing(response: Response) -> Response:
    """`response`, closing its connection after it: reading the rest of a body nobody will use
    would cost the time (and the connection) the refusal spares."""
    response.headers["Connection"] = "close"
    return response


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands over the body read ahead, then what the client sends next (its
    disconnect)."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed
