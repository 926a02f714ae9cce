"""The worker's only line to the server: HTTP calls, their refusals, and back-off on faults.

The worker is a third-party agent like any other: it imports nothing of the server.
"""

import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

import httpx
import tenacity

from app.worker import tracing
from app.worker.coalescer import WriteCoalescer

T = TypeVar("T")
SEAT_EXECUTIONS = "/v1/seats/{seat}/executions"


class ServerUnreachable(Exception):
    """No answer, or a 5xx/429 (a fault on the server's side, say a full log store): the call
    may be repeated."""


class Refused(Exception):
    """A 4xx the worker cannot fix by repeating the call."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(f"{status} {problem.get('type', '')}: {problem.get('detail', '')}")
        self.status = status
        self.problem = problem

    @property
    def type(self) -> str:
        return str(self.problem.get("type", ""))


class Stale(Refused):
    """The server says should_terminate: this attempt (or this execution) is no longer live."""


class GaveUp(Exception):
    """A repeated call was abandoned because the caller asked to stop."""


class Backoff:
    """Exponential delays with equal jitter, from `base` up to `cap` seconds."""

    def __init__(self, base: float = 0.5, cap: float = 30.0) -> None:
        self.base, self.cap, self.failures = base, cap, 0

    def delay(self, failures: int) -> float:
        """The delay after `failures` faults in a row."""
        return min(self.cap, self.base * 2 ** failures) * random.uniform(0.5, 1.0)

    def next_delay(self) -> float:
        self.failures += 1
        return self.delay(self.failures - 1)


def retrying(call: Callable[[], T], *, what: str, stop: threading.Event | None = None,
             give_up: Callable[[], bool] = lambda: False, log: Callable[[str], None] = lambda _: None) -> T:
    """`call()` until it answers or is refused; network faults are retried with back-off.
    GaveUp when `give_up()` turns true (checked between tries), or when `stop` is set."""
    backoff = Backoff()

    def said(state: tenacity.RetryCallState) -> None:  # the first fault and every tenth, not each
        if state.attempt_number == 1 or state.attempt_number % 10 == 0:
            log(f"{what}: server unreachable ({state.outcome.exception()}); retrying with back-off")

    def sleep(seconds: float) -> None:
        if stop is None:
            time.sleep(seconds)
        elif stop.wait(seconds):
            raise GaveUp(what)

    def gave_up(_: tenacity.RetryCallState) -> NoReturn:
        raise GaveUp(what)

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(ServerUnreachable), after=said,
        wait=lambda state: backoff.delay(state.attempt_number - 1), stop=lambda _: give_up(),
        sleep=sleep, retry_error_callback=gave_up)(call)


def _problem(resp: httpx.Response) -> dict[str, Any]:
    try:
        body = resp.json()
    except ValueError:
        return {"type": "unknown", "detail": resp.text[:200]}
    return body if isinstance(body, dict) else {"type": "unknown", "detail": str(body)[:200]}


def refuse(status: int, problem: dict[str, Any]) -> NoReturn:
    """Raise what a refusal means to the worker: a fault on the server's side is repeated."""
    if status >= 500 or status == 429:
        # Say which fault (database-unavailable, log-store-full, ...): the call is repeated.
        raise ServerUnreachable(f"HTTP {status} {problem.get('type', '')}".rstrip())
    raise (Stale if problem.get("should_terminate") else Refused)(status, problem)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class Api:
    """The endpoints the worker calls. One client, shared by every task thread."""

    def __init__(self, server: str, timeout: float = 15.0, batch_tick: float = 0.0,
                 log: Callable[[str], None] = lambda _: None) -> None:
        self.server, self.timeout = server.rstrip("/"), timeout
        self.http = httpx.Client(base_url=self.server, timeout=httpx.Timeout(timeout, connect=5.0))
        # The agent writes of every task, coalesced once the execution is admitted (batch_tick 0: never).
        self.coalescer = WriteCoalescer(self._post_batch, batch_tick, ServerUnreachable, log=log)

    def close(self) -> None:
        self.coalescer.close()
        self.http.close()

    def _post_batch(self, worker_token: str, entries: list[dict[str, Any]]) -> tuple[int, Any]:
        """POST /v1/attempts/batch: (status, body) of any answer but a fault worth repeating."""
        try:
            resp = self.http.post("/v1/attempts/batch", json={"entries": entries}, headers=bearer(worker_token))
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"{type(exc).__name__}: {exc}") from exc
        problem = _problem(resp)
        if resp.status_code >= 500 or resp.status_code == 429:
            refuse(resp.status_code, problem)
        return resp.status_code, problem

    def _agent_write(self, attempt_token: str, op: str, fields: dict[str, Any], single: Callable[[], Any],
                     urgent: bool = False) -> Any:
        """An attempt's write, in the next batch where it can go in one, else as `single()`;
        answered (or refused) exactly alike. The entry carries its run's traceparent, as the
        single request's header does (the server's span of it is then in the run's trace)."""
        entry = {"attempt_token": attempt_token, "op": op, **fields}
        if (trace := tracing.current.get()) is not None:
            entry["traceparent"] = trace
        answered = self.coalescer.send(entry, urgent=urgent)
        if answered is None:
            return single()
        status, body = answered
        if 200 <= status < 300:
            return body
        refuse(status, body if isinstance(body, dict) else {})

    def call(self, method: str, path: str, *, token: str | None = None, json: Any = None,
             headers: dict[str, str] | None = None, wait: float = 0.0, route: str | None = None) -> tuple[int, Any]:
        """One request (that the server may hold `wait` seconds); answers (status, body) for a
        2xx, else raises. `route`: the path's template, when values are in the path (what its
        span is named by)."""
        all_headers = {**(bearer(token) if token else {}), **(headers or {})}
        if (trace := tracing.current.get()) is not None:  # an attempt's call: in its run's trace
            all_headers["traceparent"] = trace
        timeout = self.http.timeout if not wait else httpx.Timeout(self.timeout + wait, connect=5.0)
        try:
            resp = self.http.request(method, path, json=json, headers=all_headers, timeout=timeout,
                                     extensions={tracing.ROUTE: route} if route else None)
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"{type(exc).__name__}: {exc}") from exc
        if resp.is_success:
            return resp.status_code, resp.json() if resp.content else None
        refuse(resp.status_code, _problem(resp))

    # operator calls ---------------------------------------------------------------------

    def login(self, username: str, password: str) -> str:
        return self.call("POST", "/auth/token", json={"username": username, "password": password})[1]["access_token"]

    def admit(self, operator_token: str, seat: str, body: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
        return self.call("POST", f"/v1/seats/{seat}/executions", token=operator_token, json=body,
                         headers={"Idempotency-Key": idempotency_key}, route=SEAT_EXECUTIONS)[1]

    def seat_executions(self, launcher_token: str, seat: str) -> list[dict[str, Any]]:
        """The seat's executions, oldest generation first."""
        return self.call("GET", f"/v1/seats/{seat}/executions", token=launcher_token, route=SEAT_EXECUTIONS)[1]["items"]

    # worker and agent calls ----------------------------------------------------------------

    def claim(self, worker_token: str, limit: int, queues: Sequence[str] = ("default",),
              wait: float = 0.0) -> list[dict[str, Any]]:
        """Up to `limit` WorkItems on `queues`; the server holds the request up to `wait` seconds for work."""
        body = {"limit": limit, "queues": list(queues), "wait_seconds": wait}
        return self.call("POST", "/v1/dispatch/claim", token=worker_token, json=body, wait=wait)[1]["items"]

    def report(self, attempt_token: str, state: str, reason: str | None = None,
               reschedule_at: str | None = None) -> dict[str, Any]:
        """In the next batch, sent at once (urgent): a task waits on it to start or to end."""
        body = {"state": state, **({"reason": reason} if reason else {}),
                **({"reschedule_at": reschedule_at} if reschedule_at else {})}
        return self._agent_write(attempt_token, "report", body, urgent=True, single=lambda: self.call(
            "POST", "/v1/attempts/report", token=attempt_token, json=body)[1])

    def heartbeat(self, attempt_token: str) -> None:
        self._agent_write(attempt_token, "heartbeat", {},
                          single=lambda: self.call("POST", "/v1/attempts/heartbeat", token=attempt_token))

    def release(self, attempt_token: str) -> None:
        self.call("POST", "/v1/attempts/release", token=attempt_token)

    def renew(self, attempt_token: str) -> str:
        return self.call("POST", "/v1/auth/renew", token=attempt_token)[1]["attempt_token"]

    def append_log(self, attempt_token: str, offset: int, content: str, urgent: bool = False) -> int:
        """In the next batch; `urgent` (a finished task's tail, before its outcome) sends it at once."""
        body = {"offset": offset, "content": content}
        return self._agent_write(attempt_token, "log", body, urgent=urgent, single=lambda: self.call(
            "POST", "/v1/attempts/logs", token=attempt_token, json=body)[1])["size"]
