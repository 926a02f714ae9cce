"""Coalescing the agent writes of every running task into batches (POST /v1/attempts/batch).

Each task thread still makes its own calls, and waits for their answers, exactly as with single
requests: the coalescer only carries them. A call is queued, and one sender thread posts what is
queued once per tick (`--batch-tick`, 50 ms by default), or almost at once when an urgent call
is among it (a report, `running` or an outcome, and a finished task's log tail, shipped before
its outcome): URGENT_WINDOW later, so that the tasks of one claim, starting or ending together,
share a request, and nothing a task waits on to start or to stop waits for the tick. While a
batch is in flight the next one gathers. Each entry carries its run's traceparent, as its single
request's header did (app/worker/api.py). Every entry's answer is the single request's, so a
task meets the same refusals as before: should_terminate (Stale) kills it at once, a fault is
retried as before.

Single requests remain the path for everything a batch cannot carry: before admission (journaled
outcomes re-delivered at start-up), an attempt token of another execution, a server without the
route (404/405: batches are not tried again), and any batch refused whole (its entries are then
sent one by one, each answered by its own attempt token).
"""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.worker.tokens import unverified_claims

MAX_ENTRIES = 500  # the server's limit
MAX_BATCH_BYTES = 1024 * 1024  # log content per batch, well under the route's body limit
# How long an urgent call waits for others: a few milliseconds against a round trip's tens.
URGENT_WINDOW = 0.005


@dataclass
class Pending:
    entry: dict[str, Any]
    urgent: bool
    size: int
    queued: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    answer: tuple[int, Any] | None = None  # (status, body); None: send it as a single request
    error: Exception | None = None


# post(worker_token, entries) -> (status, body) of the batch request; raises the Api's
# ServerUnreachable for a fault worth repeating.
Post = Callable[[str, list[dict[str, Any]]], tuple[int, Any]]


class WriteCoalescer:
    """Carries the calls of every task thread to the server in batches, one sender thread for them all."""

    def __init__(self, post: Post, tick: float, unreachable: type[Exception],
                 log: Callable[[str], None] = lambda _: None) -> None:
        self.post, self.tick, self.unreachable, self.log = post, tick, unreachable, log
        self.worker_token = ""
        self.execution_id = ""
        self.supported = True
        self._queue: list[Pending] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def start(self, worker_token: str, execution_id: str) -> None:
        """Batch the calls of attempts of `execution_id` from now on, with its worker token."""
        with self._cond:
            self.worker_token, self.execution_id = worker_token, execution_id
        if self._thread is None and self.tick > 0:
            self._thread = threading.Thread(target=self._run, name="coalescer", daemon=True)
            self._thread.start()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()

    def send(self, entry: dict[str, Any], *, urgent: bool = False) -> tuple[int, Any] | None:
        """The entry's (status, body), as its single request would answer; None when it is to go
        as a single request. Raises the Api's ServerUnreachable when the batch met a fault."""
        if not (self.supported and self._thread is not None and not self._closed
                and unverified_claims(entry["attempt_token"]).get("execution_id") == self.execution_id):
            return None
        pending = Pending(entry, urgent, len(entry.get("content", "")))
        with self._cond:
            self._queue.append(pending)
            self._cond.notify_all()
        pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return pending.answer

    def _take(self) -> list[Pending] | None:
        """The next batch: what is queued once a tick has passed since the first of it was
        queued, or URGENT_WINDOW after an urgent call was; None once closed."""
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if self._closed and not self._queue:
                return None
            flush_at = time.monotonic() + self.tick
            while not self._closed and len(self._queue) < MAX_ENTRIES:
                if any(p.urgent for p in self._queue):
                    flush_at = min(flush_at, min(p.queued for p in self._queue if p.urgent) + URGENT_WINDOW)
                left = flush_at - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            taken, size = [], 0
            for pending in self._queue:
                if len(taken) == MAX_ENTRIES or (taken and size + pending.size > MAX_BATCH_BYTES):
                    break
                taken.append(pending)
                size += pending.size
            del self._queue[:len(taken)]
            return taken

    def _run(self) -> None:
        while (taken := self._take()) is not None:
            self._send(taken)
        with self._cond:  # closed: whatever is still queued goes as single requests
            for pending in self._queue:
                pending.done.set()
            self._queue.clear()

    def _send(self, taken: list[Pending]) -> None:
        if not self.supported:  # queued before the server said it has no batches
            for pending in taken:
                pending.done.set()
            return
        try:
            status, body = self.post(self.worker_token, [p.entry for p in taken])
        except self.unreachable as exc:
            for pending in taken:
                pending.error = exc
                pending.done.set()
            return
        results = body.get("results") if status == 200 and isinstance(body, dict) else None
        if isinstance(results, list) and len(results) == len(taken):
            for pending, result in zip(taken, results, strict=True):
                pending.answer = (result["status"], result["body"])
                pending.done.set()
            return
        if status in (404, 405):
            self.supported = False
            self.log(f"the server has no POST /v1/attempts/batch ({status}): single requests from now on")
        for pending in taken:  # refused whole: each goes on its own, answered by its own token
            pending.done.set()
