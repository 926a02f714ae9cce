"""Wake-ups: "work may be ready" events, from the transaction that makes work ready to every
waiting claim on every replica (contract 2.2; docs/decisions/0006-waiting-claims.md).

A rail that makes task instances claimable calls `announce` inside its transaction. On
PostgreSQL that is a `NOTIFY fenceline_ready` (delivered only if the transaction commits), and
each server process LISTENs on one connection of its own; on SQLite (one process) the event
goes to this process's hub when the session commits. An event says how many task instances
became claimable (or that nobody knows) and when (now, or a later `next_eligible_at`); the hub
wakes that many waiting claims, oldest first, and keeps a timer on the earliest later time.
Payloads are JSON objects, so a later key is a compatible addition.

Routing (docs/behaviour.md, "Routing"): an event about new work names its queue, and wakes only
waiters serving that queue. A freed pool slot or tenant place (any move out of queued or
running), a grown pool or a raised or removed cap is a `room` event: it wakes the waiters whose
last look found ready work on their queues that a pool or a cap held back ("blocked"), and no
other (a waiter that found nothing ready can only be helped by new work, which names its queue).
An event that names no queue (a promotion's, the timer's, a resynchronisation) wakes the oldest
waiter of each distinct set of queues.

What this process has heard also spares looks (`Hub.quiet`): once a waiting claim's look found
nothing ready on its queues, and its execution current, the next waiting claim of that
execution on those queues need not look again while the listener has stayed connected, no
event has named any of those queues (or none) since, and for QUIET_FOR_SECONDS at most. A
`stale` event (an execution superseded or observed terminal) takes every execution's standing
away and wakes the named one's waiting claims, which then look and are told to terminate.
"""

import asyncio
import json
import logging
import math
import time
import uuid
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, TypeVar

import anyio
import psycopg
from sqlalchemy import ColumnElement, Engine, event, func, literal, text
from sqlalchemy.orm import Session

from app.db.dialect import dialect_of

log = logging.getLogger("fenceline.wakeups")
T = TypeVar("T")
A = TypeVar("A")

CHANNEL = "fenceline_ready"
_PENDING, _SENT, _TIMED = "fenceline_wakeups_pending", "fenceline_wakeups_sent", "fenceline_wakeups_timed"
# A claim takes the time-driven rails (promotion) when something may have come due, and at
# least this often whatever it heard (rows a promotion skipped because another transaction held
# them, and time-driven work whose timer this process could not set, stay claimable): the same
# bound as QUIET_FOR_SECONDS puts on a missed event. On an idle fleet each such promotion is a
# claim transaction of its own, in every process (docs/performance.md, seventh round).
PROMOTION_EVERY_SECONDS = 5.0
RECONNECT_CAP_SECONDS = 10.0
ANY_QUEUE: frozenset[str] = frozenset()  # a waiter serving every queue: woken by any work
BUSY_QUEUE_SETS = 256  # the queue sets Hub.busy and Hub.quiet remember (forgotten all at once beyond)
# How long a look that found nothing spares the next ones (Hub.quiet) at most, whatever was heard:
# the bound on work whose event this process missed (a timer it could not set, a listener whose
# connection died without a word), beside the promotion's.
QUIET_FOR_SECONDS = 5.0
HEARD_QUEUES = 4096  # the queues whose last event Hub.quiet remembers (beyond: as if every queue was named)
STANDING_EXECUTIONS = 100_000  # the executions Hub.quiet remembers as current (forgotten all at once beyond)
# A wait at least this long ends on a whole second of the monotonic clock, which every process
# of the machine shares, up to a second before it was asked to end (wait_ends).
ALIGNED_FROM_SECONDS = 10.0
# The most claim attempts one run of Hub.together takes (its transaction holds the pools' lock
# for all of them: beyond this, the next ones go in a run of their own, answered sooner).
TOGETHER_AT_MOST = 16
NOTIFY = text("SELECT pg_notify(:channel, :payload)")


@dataclass(frozen=True)
class Ready:
    """`count` task instances (None: unknown, at least one) on `queue` (None: any) become
    claimable at `at` (Unix seconds; None: now); or, with `room`, work held back by a pool or a
    cap may now fit; or, with `stale`, that execution may claim no more."""

    count: int | None = None
    at: float | None = None
    queue: str | None = None
    room: bool | None = None
    stale: str | None = None

    def payload(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None}, separators=(",", ":"))

    @classmethod
    def parse(cls, payload: str) -> "Ready":
        """The event a payload names; an unreadable one is taken as "something, now"."""
        try:
            fields = json.loads(payload) if payload else {}
            count, at, queue, stale = fields.get("count"), fields.get("at"), fields.get("queue"), fields.get("stale")
            return cls(int(count) if count is not None else None, float(at) if at is not None else None,
                       str(queue) if queue is not None else None, bool(fields.get("room")) or None,
                       str(uuid.UUID(stale)) if stale is not None else None)
        except (ValueError, TypeError, AttributeError):
            return cls()


def announce(session: Session, *, count: int | None = None, at: datetime | None = None, queue: str | None = None,
             room: bool = False, stale: uuid.UUID | None = None) -> None:
    """Tell waiting claimers, when `session`'s transaction commits, that `count` task instances
    on `queue` become claimable at `at` (now when None); with `room`, that a pool slot or a
    tenant place was freed or added; with `stale`, that this execution may claim no more.
    Nothing is told if the transaction rolls back."""
    ready = Ready(count, at.timestamp() if at is not None else None, queue, room or None,
                  str(stale) if stale is not None else None)
    if at is not None:
        session.info[_TIMED] = True  # this process's claims take the time-driven rails once it commits
    if dialect_of(session).notifies:
        payload = ready.payload()
        sent = session.info.setdefault(_SENT, set())
        if payload not in sent:  # the same event twice in one transaction is delivered once anyway
            sent.add(payload)
            session.execute(NOTIFY, {"channel": CHANNEL, "payload": payload})
    else:
        session.info.setdefault(_PENDING, []).append(ready)


def announce_queues(session: Session, queues: Iterable[str]) -> None:
    """Announce task instances on these queues (one queue per task instance) claimable now."""
    for queue, count in sorted(Counter(queues).items()):
        announce(session, count=count, queue=queue)


def announce_room(session: Session) -> None:
    """Announce that a pool slot or a tenant place was freed or added."""
    announce(session, room=True)


def announce_stale(session: Session, execution_id: uuid.UUID) -> None:
    """Announce that `execution_id` was superseded or observed terminal: it may claim no more."""
    announce(session, stale=execution_id)


def room_notification() -> ColumnElement[Any]:
    """PostgreSQL: announce_room as a column, for the RETURNING of a statement that moves a row
    out of flight (evaluated once per row moved, delivered on commit, like announce_room)."""
    return func.pg_notify(literal(CHANNEL), literal(Ready(room=True).payload()))


# The hubs of this process, by database URL, told after a commit: on SQLite every event; on
# PostgreSQL (whose events come back through LISTEN) only that time-driven work may be due, at
# once, so that a claim right after the commit that made it due takes it.
_local_hubs: dict[str, set["Hub"]] = {}


@event.listens_for(Session, "after_commit")
def _after_commit(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint's release: the events wait for the transaction's own commit
    session.info.pop(_SENT, None)
    pending, timed = session.info.pop(_PENDING, None), session.info.pop(_TIMED, False)
    if pending or timed:
        for hub in list(_local_hubs.get(str(session.get_bind().url), ())):
            if timed:
                hub.promotion_due = True
            for ready in pending or ():
                hub.deliver_threadsafe(ready)


@event.listens_for(Session, "after_rollback")
def _after_rollback(session: Session) -> None:
    session.info.pop(_SENT, None)  # PostgreSQL drops a rolled-back savepoint's NOTIFYs: send again if told again
    if session.in_nested_transaction():
        return  # a savepoint's: what was announced may still commit (an event too many wakes a look, no more)
    for key in (_PENDING, _TIMED):
        session.info.pop(key, None)


@dataclass(eq=False)
class Waiter:
    """A waiting claim: the queues it serves, whether its last look found ready work on them
    that a pool or a cap held back, and the execution it claims for."""

    future: "asyncio.Future[bool]"  # True: woken; False: its wait ended
    queues: frozenset[str]
    blocked: bool = False
    claimer: uuid.UUID | None = None

    def serves(self, queues: frozenset[str] | None) -> bool:
        return queues is None or not self.queues or not self.queues.isdisjoint(queues)


class Hub:
    """One process's waiting claims and its timer on the earliest time-driven readiness.

    `next_due()` (blocking; run in a thread) answers the earliest `next_eligible_at` still to
    come, in Unix seconds, or None. Everything else runs on the event loop, but looked_empty.
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
        self.promotion_due = True  # time-driven work may have come due (take_promotion)
        self._promoted_at = 0.0
        self._waiters: deque[Waiter] = deque()
        self._pending = 0  # task instances announced and, as far as this process knows, not taken
        # The full claims of this turn and the announced work left after the last, by queues (took).
        self._passing: dict[frozenset[str] | None, tuple[int, int]] = {}
        self._busy: set[frozenset[str]] = set()  # queue sets whose last claim came back full (busy)
        # For quiet(): whether every event reaches this hub now (PostgreSQL: while listening),
        # the generation of the last event naming each queue, naming none, and of the last stale
        # execution; the generation before the last look that found each queue set empty, and
        # before the last look that found each execution current.
        self._hearing = False
        self._heard: dict[str, int] = {}
        self._heard_all = self._heard_stale = 0
        self._empty: dict[frozenset[str], tuple[int, float]] = {}  # and when (monotonic)
        self._current: dict[uuid.UUID, int] = {}
        self._next_at: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._gathering: dict[Hashable, list[tuple[Any, asyncio.Future[Any]]]] = {}  # together(), by key
        self._together: set[asyncio.Task[Any]] = set()

    @property
    def waiting(self) -> int:
        """How many claims wait now."""
        return sum(not waiter.future.done() for waiter in self._waiters)

    @property
    def hearing(self) -> bool:
        """Whether every event reaches this hub now (PostgreSQL: while its listener listens)."""
        return self._hearing

    # lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.claim_limiter = anyio.CapacityLimiter(self.claim_threads)
        _local_hubs.setdefault(str(self.engine.url), set()).add(self)
        if dialect_of(self.engine).notifies:
            self._spawn(self._listen())  # resynchronises once it listens
        else:
            self._hearing = True  # one process: every commit's events come to this hub
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
        """An event: wake as many waiters on its queue as task instances became claimable (one
        when the count is unknown: a claim that comes back full passes the wake on; the oldest
        of each set of queues when it names no queue), the blocked waiters on `room`, or set
        the timer."""
        if ready.at is not None and ready.at > time.time():
            self._wake_at(ready.at)
            return
        if ready.at is not None or ready == Ready():  # due now, or something unknown (a resync)
            self.promotion_due = True
        self.generation += 1
        if ready.stale is not None:  # every execution's standing is to be looked at again
            stale = uuid.UUID(ready.stale)
            self._heard_stale = self.generation
            self._wake_where(lambda waiter: waiter.claimer == stale)  # to be told to terminate
            return
        if ready.room:
            self._wake_where(lambda waiter: waiter.blocked)
            return
        count = ready.count if ready.count is not None else 1
        self._pending += count
        if ready.queue is not None:
            if len(self._heard) >= HEARD_QUEUES:
                self._heard.clear()
                self._heard_all = self.generation
            self._heard[ready.queue] = self.generation
            self.wake(count, frozenset((ready.queue,)))
            return
        self._heard_all = self.generation
        per_queues: Counter[frozenset[str]] = Counter()

        def first_of_its_queues(waiter: Waiter) -> bool:
            per_queues[waiter.queues] += 1
            return per_queues[waiter.queues] <= count
        self._wake_where(first_of_its_queues)

    def wake(self, count: int, queues: frozenset[str] | None = None) -> None:
        """Wake up to `count` waiting claims serving any of `queues` (any claim when None),
        oldest first."""
        for waiter in list(self._waiters):
            if count <= 0:
                break
            if waiter.serves(queues) and self._set(waiter):
                count -= 1

    def _wake_where(self, woken: Callable[[Waiter], bool]) -> None:
        for waiter in list(self._waiters):
            if not waiter.future.done() and woken(waiter):
                self._set(waiter)

    def _set(self, waiter: Waiter) -> bool:
        self._waiters.remove(waiter)
        if waiter.future.done():
            return False
        waiter.future.set_result(True)
        return True

    def take_promotion(self) -> bool:
        """Whether a claim should take the time-driven rails first (rails.promote): something
        may have come due since a claim last did (an event with a time, the timer, a resync, a
        commit of this process that set a time), or PROMOTION_EVERY_SECONDS have passed. The
        claim that is told so takes it: the next one is not told again unless something new came."""
        now = time.monotonic()
        if self.promotion_due or now - self._promoted_at >= PROMOTION_EVERY_SECONDS:
            self.promotion_due, self._promoted_at = False, now
            return True
        return False

    def promotion_undone(self) -> None:
        """The claim take_promotion told to promote did not commit (a rollback, a fault, its
        client gone): what it promoted is due again, so the next claim is told again."""
        self.promotion_due = True

    def took(self, claimed: int, full: bool, queues: frozenset[str] | None = None) -> None:
        """A claim on `queues` came back with `claimed` items; `full` if it took all it asked
        for (more may be ready: the next waiter on those queues is woken while announced work
        may remain, and the next claim on them need not look first). The wake is passed on once
        this turn of the event loop has heard every claim made together with this one (they
        resume in the same turn): claims that took, between them, all that was announced wake
        nobody to find nothing."""
        self._pending = max(0, self._pending - claimed) if full else 0
        served = queues if queues is not None else ANY_QUEUE
        if full:
            if len(self._busy) >= BUSY_QUEUE_SETS:
                self._busy.clear()
            self._busy.add(served)
        else:
            self._busy.discard(served)
        if full and self._pending:
            if not self._passing:
                assert self._loop is not None
                self._loop.call_soon(self._pass_on)
            claims, _ = self._passing.get(queues, (0, 0))
            self._passing[queues] = (claims + 1, self._pending)
        else:  # nothing announced is left for the next waiter on these queues
            self._passing.pop(queues, None)

    def _pass_on(self) -> None:
        """One wake for each full claim of this turn on its queues, up to the announced work its
        queues' last claim left (a later claim on other queues that came back short does not
        take it away)."""
        passing, self._passing = self._passing, {}
        for queues, (claims, left) in passing.items():
            self.wake(min(claims, left), queues)

    def quiet(self, claimer: uuid.UUID, queues: Iterable[str]) -> bool:
        """Whether a look for `claimer` on exactly these queues is known to find nothing ready
        and the execution current: since a look found so (looked_empty), less than
        QUIET_FOR_SECONDS ago, every event has reached this hub and none named these queues, or
        no queue, or any execution as stale. A waiting claim then spares its look and waits (what
        makes work ready later wakes it). Never for a claim that does not wait: an event
        committed elsewhere may still be on its way."""
        served = frozenset(queues)
        looked, current = self._empty.get(served), self._current.get(claimer)
        if not (self._hearing and served and looked is not None and current is not None):
            return False
        empty, at = looked
        return (time.monotonic() - at < QUIET_FOR_SECONDS and empty >= self._heard_all
                and current >= self._heard_stale and all(self._heard.get(queue, 0) <= empty for queue in served))

    def looked_empty(self, claimer: uuid.UUID, queues: Iterable[str], seen: int) -> None:
        """A look begun at generation `seen` found `claimer` current and nothing ready on
        `queues`. Safe from a claim's worker thread: it only records, and quiet() (on the event
        loop) weighs the record against every event after `seen`."""
        for marks, limit in ((self._empty, BUSY_QUEUE_SETS), (self._current, STANDING_EXECUTIONS)):
            if len(marks) >= limit:
                marks.clear()
        self._empty[frozenset(queues)] = (seen, time.monotonic())
        self._current[claimer] = seen

    def busy(self, queues: Iterable[str]) -> bool:
        """Whether the last claim on exactly these queues took all it asked for: work is likely
        still ready there, so a claim spares its first look (dispatch.work_ready) and claims."""
        return frozenset(queues) in self._busy

    async def wait(self, timeout: float, queues: frozenset[str] | None = None, blocked: bool = False,
                   claimer: uuid.UUID | None = None) -> bool:
        """Wait to be woken, at most `timeout` seconds, by work on `queues` (every queue when
        None), if `blocked` (ready work on them was held back) by freed room, or by `claimer`
        turning stale; True if woken. The wait is one future and one timer, no task of its own:
        a woken waiter's wake is used, also as the timer fires."""
        assert self._loop is not None, "the hub has not started"
        waiter = Waiter(self._loop.create_future(), queues if queues is not None else ANY_QUEUE, blocked, claimer)
        self._waiters.append(waiter)
        timer = self._loop.call_later(timeout, self._wait_ended, waiter)
        try:
            return await waiter.future
        finally:
            timer.cancel()
            if waiter.future.cancelled():  # its request was cancelled: a later wake skips it
                self._forget(waiter)

    def _wait_ended(self, waiter: Waiter) -> None:
        if not waiter.future.done():
            waiter.future.set_result(False)
            self._forget(waiter)

    def _forget(self, waiter: Waiter) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass  # woken already

    # claim threads -------------------------------------------------------------------------

    async def together(self, key: Hashable, run: Callable[[list[A]], list[Any]], ask: A) -> Any:
        """`run(asks)`, in a claim thread, for every ask made with this `key` in this turn of
        the event loop (up to TOGETHER_AT_MOST; the woken waiters of one event ask in the same
        turn): one run for all of them, each answered with its item of the list `run` answers
        in their order (raised, if it is an exception). A run that fails fails every ask."""
        assert self._loop is not None, "the hub has not started"
        asks = self._gathering.get(key)
        if asks is None or len(asks) >= TOGETHER_AT_MOST:
            asks = self._gathering[key] = []
            self._loop.call_soon(self._run_together, key, asks, run)
        answer = self._loop.create_future()
        asks.append((ask, answer))
        got = await answer
        if isinstance(got, BaseException):
            raise got
        return got

    def _run_together(self, key: Hashable, asks: list[tuple[Any, "asyncio.Future[Any]"]],
                      run: Callable[[list[Any]], list[Any]]) -> None:
        if self._gathering.get(key) is asks:
            del self._gathering[key]

        async def answer() -> None:
            asking = [(ask, future) for ask, future in asks if not future.done()]  # not given up by its request
            try:
                if asking:
                    got = await anyio.to_thread.run_sync(run, [ask for ask, _ in asking], limiter=self.claim_limiter)
                    for (_, future), one in zip(asking, got, strict=True):
                        if not future.done():
                            future.set_result(one)
            except BaseException as exc:  # noqa: B036  (every ask is answered, also when cancelled)
                for _, future in asking:
                    if not future.done():
                        future.set_result(exc)

        task = asyncio.ensure_future(answer())
        self._together.add(task)
        task.add_done_callback(self._together.discard)

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
                        conninfo, autocommit=True, keepalives=1, keepalives_idle=30, keepalives_interval=10,
                        keepalives_count=3) as conn:  # a connection dead without a word: lost within a minute
                    conn.add_notify_handler(self._notified)  # also what arrives while LISTEN runs
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self._resync()  # what was looked at before may have changed unheard
                    self._hearing, delay = True, 0.5
                    await self._hear(conn)
            except (psycopg.Error, OSError) as exc:
                log.warning("wake-up listener lost its connection (%s); reconnecting in %.1fs", exc, delay)
            except Exception:  # a bug must not end the listening for good: say it, and listen again
                log.exception("wake-up listener failed; listening again in %.1fs", delay)
            finally:
                self._hearing = False
            await asyncio.sleep(delay)
            delay = min(RECONNECT_CAP_SECONDS, delay * 2)

    def _notified(self, note: psycopg.Notify) -> None:
        self.deliver(Ready.parse(note.payload))

    async def _hear(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Hand the notifications that reach `conn` to its notify handlers (_notified) until it is
        lost (psycopg's error).

        Read when its socket is readable, not through psycopg's `notifies()`, which wakes ten
        times a second in every process to find nothing (docs/performance.md, eighth round).
        Nothing else uses the connection once it listens. The socket is watched only while
        waiting, as psycopg does: libpq closes it when it finds the connection lost."""
        assert self._loop is not None
        loop, pgconn, fd = self._loop, conn.pgconn, conn.fileno()
        handle = pgconn.notify_handler  # psycopg's: decodes, then calls the connection's handlers
        assert handle is not None
        while True:
            pgconn.consume_input()
            while (note := pgconn.notifies()) is not None:
                handle(note)
            readable = loop.create_future()
            loop.add_reader(fd, _settle, readable)
            try:
                await readable
            finally:
                loop.remove_reader(fd)


def _settle(future: "asyncio.Future[None]") -> None:
    if not future.done():
        future.set_result(None)


def wait_ends(now: float, seconds: float) -> float:
    """When a wait of `seconds` begun at `now` (the loop's monotonic clock) ends: a long one
    (ALIGNED_FROM_SECONDS or more) on the whole second before, so that the waits of an idle
    fleet that end in the same second, in every process, end in one wake-up of each process. A
    wake-up of its own for each wait that ran out cost an idle process as much again as the
    renewal that follows it (docs/performance.md, eighth round)."""
    end = now + seconds
    return math.floor(end) if seconds >= ALIGNED_FROM_SECONDS else end


async def wait_for_work(hub: Hub, attempt: Callable[[], Awaitable[tuple[list[T], bool]]], *, limit: int,
                        seconds: float, gone: Callable[[], Awaitable[bool]],
                        queues: Iterable[str] | None = None, claimer: uuid.UUID | None = None) -> list[T]:
    """`attempt()` (one claim of up to `limit` on `queues` for `claimer`, answering its items
    and whether ready work on them was held back by a pool or a cap) until it answers something
    or its wait ends (wait_ends: `seconds`, a long wait up to a second less), waiting for
    wake-ups on those queues in between. Nothing is claimed once `gone()` (the client left); a
    waiter that was woken and does not claim passes its wake on. `gone()` (a cancelled receive)
    is asked once before a claim that does not wait, and after each wait: before a waiting
    claim's first attempt claim_now's own check, of the waiting clients it hands items to before
    it commits, covers it."""
    served = frozenset(queues) if queues is not None else None
    loop = asyncio.get_running_loop()
    deadline = wait_ends(loop.time(), seconds)
    woken = False
    while True:
        if (woken or seconds <= 0) and await gone():
            if woken:
                hub.wake(1, served)
            return []
        seen = hub.generation
        try:
            items, blocked = await attempt()
        except BaseException:
            if woken:
                hub.wake(1, served)
            raise
        hub.took(len(items), len(items) >= limit, served)
        remaining = deadline - loop.time()
        if items or remaining <= 0:
            return items
        # An event during the claim: look again.
        woken = hub.generation != seen or await hub.wait(remaining, served, blocked, claimer)
        if not woken:
            return []
