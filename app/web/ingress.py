"""What every request passes before routing, parsing or any token check (contract 7).

Its body is counted as it arrives, Content-Length or chunked, and refused with 413 as soon as
it passes its route's limit: nothing past the limit is held in memory, and the connection is
closed rather than read to the end. A route whose limit is larger than the default (a run, a
log append, a snapshot) gets it only for a caller whose headers carry a token that route
accepts (`allows`, which the application hands in): before any of its body is read, a request
without one is held to the default, so a stranger cannot make the server hold a gigabyte. A
large body is parsed in a worker thread, never on the event loop, and its parsed value kept in
the scope (PARSED_JSON) for a route that would otherwise parse it again.

A JSON body is refused with 422 if no route may take it: text that is not UTF-8, numbers that
are not finite (`1e400`, `NaN`), or nesting deeper than the whole-body limit. Malformed JSON
(or a body that is no JSON at all) passes on to the route, which names where it broke.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.config import Settings
from app.web.problems import render, validation_problem
from app.web.schemas import free_form_depth, json_depth

# Room for JSON escaping around a log append's content (the setting bounds the content).
LOG_ENVELOPE = 2


@dataclass(frozen=True)
class Limits:
    """The body limit of every route (by method and path, else `default_bytes`), with the token
    scopes a caller needs for a route's own limit, and the JSON nesting limits of a whole body
    and of a free-form field."""

    default_bytes: int
    route_bytes: dict[tuple[str, str], tuple[int, tuple[str, ...]]]
    body_depth: int
    free_form_depth: int

    @classmethod
    def from_settings(cls, settings: Settings) -> "Limits":
        return cls(settings.max_request_bytes, {
            ("POST", "/v1/runs"): (settings.run_max_request_bytes, ("operator",)),
            ("POST", "/v1/admin/snapshot"): (settings.snapshot_max_request_bytes, ("operator",)),
            ("POST", "/v1/attempts/logs"): (LOG_ENVELOPE * settings.log_max_request_bytes + 1024, ("attempt",)),
            # A batch carries up to 500 entries' tokens and, together, one append's worth of log.
            ("POST", "/v1/attempts/batch"): (LOG_ENVELOPE * settings.log_max_request_bytes + 1024 * 1024, ("worker",)),
        }, settings.max_json_depth, settings.max_free_form_depth)

    def body_bytes(self, scope: Scope, allows: "Allows") -> tuple[int, bool]:
        """The limit of this request's body, and whether it is the default only because the
        caller showed no token the route accepts."""
        limit, scopes = self.route_bytes.get((scope["method"], scope["path"]), (self.default_bytes, ()))
        if limit > self.default_bytes and not allows(scope, scopes):
            return self.default_bytes, True
        return limit, False


# Whether the request's headers carry a valid token of one of the scopes (app/auth/deps.py's
# bearer_allows): asked only for a route whose limit is larger than the default.
Allows = Callable[[Scope, tuple[str, ...]], bool]
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

    def __init__(self, app: ASGIApp, limits: Limits, allows: Allows) -> None:
        self.app, self.limits, self.allows = app, limits, allows

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
        limit, untrusted = self.limits.body_bytes(scope, self.allows)
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await self._too_large(scope, receive, send, limit, untrusted)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before sending its body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._too_large(scope, receive, send, limit, untrusted)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        del chunks
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

    @staticmethod
    async def _too_large(scope: Scope, receive: Receive, send: Send, limit: int, untrusted: bool) -> None:
        # Closing the connection spares reading the rest of a body nobody will use.
        without = " without a valid token of a caller it accepts" if untrusted else ""
        response = render(Request(scope), 413, "payload-too-large", "Payload too large",
                          f"A request to {scope['path']} carries at most {limit} bytes{without}.",
                          headers={"Connection": "close"})
        await response(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands over the body read ahead, then what the client sends next (its
    disconnect)."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed
