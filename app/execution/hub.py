"""The process's hub of waiting claims (contract 2.2; docs/decisions/0006-waiting-claims.md).

It hears the events of app/orchestration/events.py (SQLite: after this process's commits;
PostgreSQL: from app/execution/listener.py) and wakes the claims waiting for them. A claim's
passes and its waits between them are app/execution/claims.py's (wait_for_work).
"""

import asyncio
import logging
import time
import uuid
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from sqlalchemy import Engine

from app.db.dialect import dialect_of
from app.execution import listener
from app.orchestration.events import Ready, listen_locally, unlisten

log = logging.getLogger("fenceline.wakeups")

# A claim takes the time-driven rails (promotion) when something may have come due, and at least
# this often whatever it heard, so that rows a promotion skipped and timers this process could not
# set stay claimable within the bound EMPTY_LOOK_TRUSTED_SECONDS puts on a missed event. Not more
# often: on an idle fleet each promotion is a claim transaction of its own, in every process.
PROMOTION_EVERY_SECONDS = 5.0
ANY_QUEUE: frozenset[str] = frozenset()  # a waiter serving every queue: woken by any work
REMEMBERED_QUEUE_SETS = 256  # the queue sets last_claim_full and may_skip_look remember (all forgotten beyond)
# How long a look that found nothing spares the next ones at most, whatever was heard: the bound on
# work whose event this process missed (a timer it could not set, a listener whose connection died
# without a word).
EMPTY_LOOK_TRUSTED_SECONDS = 5.0
HEARD_QUEUES = 4096  # the queues whose last event may_skip_look remembers (beyond: as if every queue was named)
STANDING_EXECUTIONS = 100_000  # the executions may_skip_look remembers as current (all forgotten beyond)


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

    Its rules (tests/execution/waiting/, tests/routing/test_waking.py):
    - work on a queue wakes that many waiters serving it, oldest first (an unknown count: one);
    - an event naming no queue wakes the oldest waiter of each set of queues;
    - `room` wakes only the waiters whose last look found work held back (blocked);
    - `stale` wakes the named execution's waiters, and makes every execution look again;
    - a time still to come sets the timer; when it fires, one waiter is woken;
    - a full claim passes its wake on at the end of its turn, while announced work is left;
    - a look that found nothing spares the next ones while nothing new was heard (may_skip_look);
    - a wait answers True when woken, False when it ran out; a cancelled one takes no wake.

    `next_due()` (blocking; run in a thread) answers the earliest `next_eligible_at` still to
    come, in Unix seconds, or None. Everything else runs on the event loop, but looked_empty
    and committed.
    """

    def __init__(self, engine: Engine, next_due: Callable[[], float | None]) -> None:
        self.engine, self.next_due = engine, next_due
        self.generation = 0  # counts events: a claim that saw it move looks again before waiting
        self.promotion_due = True  # time-driven work may have come due (take_promotion)
        self._promoted_at = 0.0
        self._waiters: deque[Waiter] = deque()
        self._pending = 0  # task instances announced and, as far as this process knows, not taken
        # The full claims of this turn and the announced work left after the last, by queues (record_claim).
        self._wakes_to_pass: dict[frozenset[str] | None, tuple[int, int]] = {}
        self._full: set[frozenset[str]] = set()  # queue sets whose last claim came back full
        # For may_skip_look(): whether every event reaches this hub now (PostgreSQL: while listening),
        # the generation of the last event naming each queue, naming none, and of the last stale
        # execution; the generation before the last look that found each queue set empty, and
        # before the last look that found each execution current.
        self._hearing = False
        self._heard: dict[str, int] = {}
        self._heard_every_queue = self._heard_stale = 0
        self._empty: dict[frozenset[str], tuple[int, float]] = {}  # and when (monotonic)
        self._current: dict[uuid.UUID, int] = {}
        self._next_at: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

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
        """Hear every event from now on; resynchronise (SQLite: now; PostgreSQL: once listening)."""
        self._loop = asyncio.get_running_loop()
        listen_locally(str(self.engine.url), self.committed)
        if dialect_of(self.engine).notifies:
            self._spawn(listener.listen(self.engine.url, self.deliver, self._listening))
        else:
            self._hearing = True  # one process: every commit's events come to this hub
            self._resync()

    async def stop(self) -> None:
        """Hear no more; every waiting claim is answered at once."""
        unlisten(str(self.engine.url), self.committed)
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.wake(len(self._waiters))

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _listening(self, listening: bool) -> None:
        if listening:
            self._resync()  # what was looked at before may have changed unheard
        self._hearing = listening

    # events --------------------------------------------------------------------------------

    def committed(self, events: Sequence[Ready], timed: bool) -> None:
        """A commit of this process announced `events` (SQLite) or made time-driven work due
        (`timed`: the next claim promotes). Safe from the committing thread."""
        if timed:
            self.promotion_due = True
        for ready in events:
            self.deliver_threadsafe(ready)

    def deliver_threadsafe(self, ready: Ready) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.deliver, ready)

    def deliver(self, ready: Ready) -> None:
        """An event: wake as the class's rules say, or set the timer for a time to come."""
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
                self._heard_every_queue = self.generation
            self._heard[ready.queue] = self.generation
            self.wake(count, frozenset((ready.queue,)))
            return
        self._heard_every_queue = self.generation
        per_queues: Counter[frozenset[str]] = Counter()

        def first_of_its_queues(waiter: Waiter) -> bool:
            per_queues[waiter.queues] += 1
            return per_queues[waiter.queues] <= count
        self._wake_where(first_of_its_queues)

    def wake_all(self) -> None:
        """Wake every waiting claim, and make those between two waits look again as after an
        event (a replica draining: each then finds it is to answer)."""
        self.generation += 1
        self.wake(len(self._waiters))

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

    # what claims found ---------------------------------------------------------------------

    def take_promotion(self) -> bool:
        """Whether this claim takes the time-driven rails first (rails.promote): once after
        anything that may have made work due (an event with a time, the timer, a resync, a
        commit of this process that set a time), and every PROMOTION_EVERY_SECONDS."""
        now = time.monotonic()
        if self.promotion_due or now - self._promoted_at >= PROMOTION_EVERY_SECONDS:
            self.promotion_due, self._promoted_at = False, now
            return True
        return False

    def promotion_undone(self) -> None:
        """The promoting claim did not commit: the next claim is told to promote again."""
        self.promotion_due = True

    def record_claim(self, claimed: int, full: bool, queues: frozenset[str] | None = None) -> None:
        """A claim on `queues` came back with `claimed` items, `full` if it took all it asked
        for. A full claim marks its queues full (last_claim_full) and, once the claims of this
        turn of the loop have all said what they took, passes a wake on if announced work is left
        (_pass_wakes_on)."""
        self._pending = max(0, self._pending - claimed) if full else 0
        served = queues if queues is not None else ANY_QUEUE
        if full:
            if len(self._full) >= REMEMBERED_QUEUE_SETS:
                self._full.clear()
            self._full.add(served)
        else:
            self._full.discard(served)
        if full and self._pending:
            if not self._wakes_to_pass:
                assert self._loop is not None
                self._loop.call_soon(self._pass_wakes_on)
            claims, _ = self._wakes_to_pass.get(queues, (0, 0))
            self._wakes_to_pass[queues] = (claims + 1, self._pending)
        else:  # nothing announced is left for the next waiter on these queues
            self._wakes_to_pass.pop(queues, None)

    def _pass_wakes_on(self) -> None:
        """One wake per full claim of this turn on its queues, up to the announced work the
        last claim on those queues left."""
        passing, self._wakes_to_pass = self._wakes_to_pass, {}
        for queues, (claims, left) in passing.items():
            self.wake(min(claims, left), queues)

    def may_skip_look(self, claimer: uuid.UUID, queues: Iterable[str]) -> bool:
        """Whether a waiting claim for `claimer` on exactly these queues may skip its look: a
        look found nothing and the execution current (looked_empty) less than
        EMPTY_LOOK_TRUSTED_SECONDS ago, the hub has heard every event since, and none named these
        queues, no queue, or a stale execution. Never for a claim that does not wait."""
        served = frozenset(queues)
        looked, current = self._empty.get(served), self._current.get(claimer)
        if not (self._hearing and served and looked is not None and current is not None):
            return False
        empty, at = looked
        return (time.monotonic() - at < EMPTY_LOOK_TRUSTED_SECONDS and empty >= self._heard_every_queue
                and current >= self._heard_stale and all(self._heard.get(queue, 0) <= empty for queue in served))

    def looked_empty(self, claimer: uuid.UUID, queues: Iterable[str], seen: int) -> None:
        """A look begun at generation `seen` found `claimer` current and nothing ready on
        `queues`. Safe from a claim thread: it only records, and may_skip_look weighs it."""
        for marks, limit in ((self._empty, REMEMBERED_QUEUE_SETS), (self._current, STANDING_EXECUTIONS)):
            if len(marks) >= limit:
                marks.clear()
        self._empty[frozenset(queues)] = (seen, time.monotonic())
        self._current[claimer] = seen

    def last_claim_full(self, queues: Iterable[str]) -> bool:
        """Whether the last claim on exactly these queues came back full: the next one claims
        without looking first (dispatch.work_ready)."""
        return frozenset(queues) in self._full

    # waiting -------------------------------------------------------------------------------

    async def wait(self, timeout: float, queues: frozenset[str] | None = None, blocked: bool = False,
                   claimer: uuid.UUID | None = None) -> bool:
        """Wait at most `timeout` seconds for work on `queues` (every queue when None), for
        room if `blocked`, or for `claimer` turning stale; True if woken. One future and one
        timer, no task."""
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

