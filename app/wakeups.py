"""Wake-ups: "work may be ready" events, from the transaction that makes work ready to every
waiting claim on every replica (contract 2.2; docs/decisions/0006-waiting-claims.md).

A rail that makes task instances claimable calls `announce` inside its transaction. On
PostgreSQL that is a `NOTIFY fenceline_ready` (delivered only if the transaction commits), and
each server process LISTENs on one connection of its own; on SQLite (one process) the event
goes to this process's hub when the session commits. An event says how many task instances
became claimable (or that nobody knows) and when (now, or a later `next_eligible_at`); the hub
wakes that many waiting claims, oldest first, and keeps a timer on the earliest later time.
Payloads are JSON objects, so a later key (a queue name) is a compatible addition.
"""

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, TypeVar

import anyio
import psycopg
from sqlalchemy import Engine, event, text
from sqlalchemy.orm import Session

log = logging.getLogger("fenceline.wakeups")
T = TypeVar("T")

CHANNEL = "fenceline_ready"
_PENDING, _SENT = "fenceline_wakeups_pending", "fenceline_wakeups_sent"
RECONNECT_CAP_SECONDS = 10.0


@dataclass(frozen=True)
class Ready:
    """`count` task instances (None: unknown, at least one) become claimable at `at` (Unix
    seconds; None: now)."""

    count: int | None = None
    at: float | None = None

    def payload(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None}, separators=(",", ":"))

    @classmethod
    def parse(cls, payload: str) -> "Ready":
        """The event a payload names; an unreadable one is taken as "something, now"."""
        try:
            fields = json.loads(payload) if payload else {}
            count, at = fields.get("count"), fields.get("at")
            return cls(int(count) if count is not None else None, float(at) if at is not None else None)
        except (ValueError, TypeError, AttributeError):
            return cls()


def announce(session: Session, *, count: int | None = None, at: datetime | None = None) -> None:
    """Tell waiting claimers, when `session`'s transaction commits, that `count` task instances
    become claimable at `at` (now when None). Nothing is told if the transaction rolls back."""
    ready = Ready(count, at.timestamp() if at is not None else None)
    if session.get_bind().dialect.name == "postgresql":
        payload = ready.payload()
        sent = session.info.setdefault(_SENT, set())
        if payload not in sent:  # the same event twice in one transaction is delivered once anyway
            sent.add(payload)
            session.execute(text("SELECT pg_notify(:channel, :payload)"), {"channel": CHANNEL, "payload": payload})
    else:
        session.info.setdefault(_PENDING, []).append(ready)


# SQLite: the hubs of this process, by database URL, told after a commit.
_local_hubs: dict[str, set["Hub"]] = {}


@event.listens_for(Session, "after_commit")
def _after_commit(session: Session) -> None:
    session.info.pop(_SENT, None)
    pending = session.info.pop(_PENDING, None)
    if pending:
        for hub in list(_local_hubs.get(str(session.get_bind().url), ())):
            for ready in pending:
                hub.deliver_threadsafe(ready)


@event.listens_for(Session, "after_rollback")
def _after_rollback(session: Session) -> None:
    session.info.pop(_SENT, None)
    session.info.pop(_PENDING, None)


class Hub:
    """One process's waiting claims and its timer on the earliest time-driven readiness.

    `next_due()` (blocking; run in a thread) answers the earliest `next_eligible_at` still to
    come, in Unix seconds, or None. Everything else runs on the event loop.
    """

    def __init__(self, engine: Engine, next_due: Callable[[], float | None], claim_threads: int) -> None:
        self.engine, self.next_due, self.claim_threads = engine, next_due, claim_threads
        # Claim attempts run on threads of their own limiter, not the shared threadpool's: a
        # burst of claims (a fleet renewing its waits) then neither takes every thread nor every
        # pooled connection from the requests already holding one (a session waiting for a
        # thread to commit on, while claim threads wait for its connection, is a deadlock
        # until the pool's timeout).
        self.claim_limiter: anyio.CapacityLimiter | None = None
        self.generation = 0  # counts events: a claim that saw it move looks again before waiting
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._pending = 0  # task instances announced and, as far as this process knows, not taken
        self._next_at: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def waiting(self) -> int:
        """How many claims wait now."""
        return sum(not waiter.done() for waiter in self._waiters)

    # lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.claim_limiter = anyio.CapacityLimiter(self.claim_threads)
        if self.engine.dialect.name == "postgresql":
            self._spawn(self._listen())  # resynchronises once it listens
        else:
            _local_hubs.setdefault(str(self.engine.url), set()).add(self)
            self._resync()

    async def stop(self) -> None:
        _local_hubs.get(str(self.engine.url), set()).discard(self)
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.wake(len(self._waiters))  # waiting claims answer at once

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # events --------------------------------------------------------------------------------

    def deliver_threadsafe(self, ready: Ready) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.deliver, ready)

    def deliver(self, ready: Ready) -> None:
        """An event: wake as many waiters as task instances became claimable (one when the
        count is unknown: a claim that comes back full passes the wake on), or set the timer."""
        if ready.at is not None and ready.at > time.time():
            self._wake_at(ready.at)
            return
        self.generation += 1
        count = ready.count if ready.count is not None else 1
        self._pending += count
        self.wake(count)

    def wake(self, count: int) -> None:
        """Wake up to `count` waiting claims, oldest first."""
        while count > 0 and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                count -= 1

    def took(self, claimed: int, full: bool) -> None:
        """A claim came back with `claimed` items; `full` if it took all it asked for (more may
        be ready: the next waiter is woken while announced work may remain)."""
        self._pending = max(0, self._pending - claimed) if full else 0
        if full and self._pending:
            self.wake(1)

    async def wait(self, timeout: float) -> bool:
        """Wait to be woken, at most `timeout` seconds; True if woken."""
        assert self._loop is not None, "the hub has not started"
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            pass
        finally:
            if not waiter.done():  # not woken: a later wake skips it
                waiter.cancel()
        return not waiter.cancelled()  # woken, also as the wait ended: the wake is used, not lost

    # time-driven readiness -----------------------------------------------------------------

    def _wake_at(self, at: float) -> None:
        if self._next_at is not None and self._next_at <= at:
            return
        assert self._loop is not None
        self._next_at = at
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._loop.call_later(max(0.0, at - time.time()), self._due)

    def _due(self) -> None:
        self._timer, self._next_at = None, None
        self._resync()

    def _resync(self) -> None:
        """Something may be ready that no event told of (a time passed, or events were missed
        while not listening): wake one waiter, and set the timer from the database."""
        self.deliver(Ready())
        self._spawn(self._refresh_timer())

    async def _refresh_timer(self) -> None:
        try:
            at = await anyio.to_thread.run_sync(self.next_due)
        except Exception:  # the database is away: the next event or the listener's return resyncs
            log.warning("could not read the next time-driven readiness", exc_info=True)
            return
        if at is not None:
            self._wake_at(at)

    # PostgreSQL ----------------------------------------------------------------------------

    async def _listen(self) -> None:
        """LISTEN on one connection of this process; reconnect with back-off when it is lost."""
        conninfo = self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        delay = 0.5
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                        conninfo, autocommit=True, keepalives=1, keepalives_idle=30) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self._resync()
                    delay = 0.5
                    async for note in conn.notifies():
                        self.deliver(Ready.parse(note.payload))
            except psycopg.Error as exc:
                log.warning("wake-up listener lost its connection (%s); reconnecting in %.1fs", exc, delay)
            await asyncio.sleep(delay)
            delay = min(RECONNECT_CAP_SECONDS, delay * 2)


async def wait_for_work(hub: Hub, attempt: Callable[[], Awaitable[list[T]]], *, limit: int, seconds: float,
                        gone: Callable[[], Awaitable[bool]]) -> list[T]:
    """`attempt()` (one claim of up to `limit`) until it answers something or `seconds` have
    passed, waiting for wake-ups in between. Nothing is claimed once `gone()` (the client
    left); a waiter that was woken and does not claim passes its wake on."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    woken = False
    while True:
        if await gone():
            if woken:
                hub.wake(1)
            return []
        seen = hub.generation
        try:
            items = await attempt()
        except BaseException:
            if woken:
                hub.wake(1)
            raise
        hub.took(len(items), len(items) >= limit)
        remaining = deadline - loop.time()
        if items or remaining <= 0:
            return items
        woken = hub.generation != seen or await hub.wait(remaining)  # an event during the claim: look again
        if not woken:
            return []
