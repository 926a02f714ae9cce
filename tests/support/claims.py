"""Waiting claims against a live server, and the server's hub of waiters (app.state.wakeups):
what a test of waking asserts on instead of waiting a claim's wait out."""

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
from sqlalchemy import event

from app.execution.schemas import MAX_CLAIM_WAIT_SECONDS
from tests.support.api import Worker, json_of
from tests.support.servers import LiveServer
from tests.support.waiting import wait_until

WAIT = MAX_CLAIM_WAIT_SECONDS  # the longest a claim may wait: far longer than any wake-up takes


def hub(server: LiveServer) -> Any:
    """The server's hub of waiting claims: `waiting` (how many claims wait now), `hearing`
    (whether every event reaches it), `generation` (events heard so far)."""
    return server.app.state.wakeups


def asleep(server: LiveServer) -> list[Any]:
    """The hub's waiters waiting now, oldest first. A woken waiter leaves the hub (one that looks
    and waits again is a new waiter): a waiter still in this list was never woken."""
    return [waiter for waiter in hub(server)._waiters if not waiter.future.done()]


def hears(server: LiveServer) -> None:
    """Until every event reaches the server's hub (PostgreSQL: once its listener listens; the
    listener's start wakes a waiting claim on its own)."""
    wait_until(lambda: hub(server).hearing, "the server to hear every event")


def heard_after(server: LiveServer, generation: int, what: str) -> None:
    """Until the server's hub has heard an event after `generation` (of `what`)."""
    wait_until(lambda: hub(server).generation > generation, f"{what} to be heard")


class Waiting:
    """A waiting claim on its own connection and thread; `result()` is its items."""

    def __init__(self, server: LiveServer, worker: Worker, wait: float = WAIT, limit: int = 1,
                 queues: list[str] | None = None) -> None:
        self.client = server.client(verify=False)
        self.pool = ThreadPoolExecutor(max_workers=1)
        body = {"limit": limit, "wait_seconds": wait, **({"queues": queues} if queues else {})}
        self.future = self.pool.submit(self._claim, worker.headers, body)

    def _claim(self, headers: dict[str, str], body: dict[str, Any]) -> httpx.Response:
        with self.client:
            return self.client.post("/v1/dispatch/claim", json=body, headers=headers)

    def response(self) -> httpx.Response:
        try:
            return self.future.result(timeout=WAIT + 30)
        finally:
            self.pool.shutdown()

    def result(self) -> list[dict[str, Any]]:
        return json_of(self.response())["items"]


def waiting_claims(server: LiveServer, workers: list[Worker], **kwargs: Any) -> list[Waiting]:
    """Waiting claims of `workers`, each one waiting on the server before the next starts
    (counted beyond the claims that waited already: a claim that has not reached the hub yet may
    find work without waking, as a test that waits on a claim waiting already would not expect)."""
    started: list[Waiting] = []
    already = hub(server).waiting
    for worker in workers:
        started.append(Waiting(server, worker, **kwargs))
        count = already + len(started)
        wait_until(lambda: hub(server).waiting >= count, f"{count} waiting claims")  # noqa: B023
    return started


def raw_claim(worker: Worker, body: bytes) -> bytes:
    """A claim request as bytes, for a client that will leave without reading the answer."""
    return (b"POST /v1/dispatch/claim HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            b"Authorization: " + worker.headers["Authorization"].encode() +
            b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


@contextmanager
def claim_transactions(server: LiveServer) -> Iterator[dict[str, Any]]:
    """While inside: how many claims (claim rail UPDATEs) each transaction of `server` that
    ended held, by how it ended ("commit", "rollback"), and how many looks ran ("looks")."""
    engine = server.app.state.engine
    ended: dict[str, Any] = {"commit": [], "rollback": [], "looks": 0}
    claims: dict[Any, int] = {}

    def count(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "UPDATE task_instances SET" in statement and "AS trace_id" in statement:  # the claim rail
            claims[conn] = claims.get(conn, 0) + 1
        elif "AS ready" in statement:
            ended["looks"] += 1

    def end(how: str) -> Callable[[Any], None]:
        def record(conn: Any) -> None:
            if conn in claims:
                ended[how].append(claims.pop(conn))
        return record
    listeners = [("before_cursor_execute", count), ("commit", end("commit")), ("rollback", end("rollback"))]
    for name, listener in listeners:
        event.listen(engine, name, listener)
    try:
        yield ended
    finally:
        for name, listener in listeners:
            event.remove(engine, name, listener)


def found_nothing(server: LiveServer, worker: Worker) -> None:
    """Waiting claims of `worker` that find nothing, once `server` hears every event: the first
    takes the time-driven rails (which the server's start made due), the second looks."""
    wait_until(lambda: hub(server).hearing, "the server to hear every event")
    for _ in range(2):
        assert Waiting(server, worker, wait=0.2).result() == []


