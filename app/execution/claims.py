"""Claims, waiting or not (contract 2.2; docs/decisions/0006-waiting-claims.md).

A claim looks for work and claims it in a claim thread, together with the claims made on the same
queues in the same turn of the event loop (ClaimTurns). A claim that waits does so between its
passes on the process's hub of waiters (app/execution/hub.py), which wakes it when work is heard of.
"""

import asyncio
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import anyio
from sqlalchemy import Engine
from sqlmodel import Session

from app.auth import tokens
from app.db.retries import retried
from app.errors import AppError
from app.execution import dispatch
from app.execution.hub import Hub
from app.execution.schemas import Correlation, WorkItem
from app.telemetry import tracing
from app.telemetry.metrics import count_conflict

log = logging.getLogger("fenceline.claims")
T = TypeVar("T")
# The most claims one turn's transaction takes: it holds the pools' lock for all of them, so the
# claims beyond go in a turn of their own and are answered sooner.
CLAIMS_PER_TURN = 16
# A wait at least this long ends on a whole second of the monotonic clock, which every process of
# the machine shares, up to a second before it was asked to end (wait_ends).
ALIGNED_FROM_SECONDS = 10.0
# What a claim is answered: its items and, when it claimed nothing and waits, whether a pool or a
# cap held ready work back; or its refusal.
ClaimResult = tuple[list[WorkItem], bool] | AppError


@dataclass(frozen=True)
class PendingClaim:
    """A claim not yet answered: for `execution_id`, up to `limit` on `queues`. `waits` if its
    client waits (then it may have left: `gone()`); `keyring` and `ttl_seconds` mint its attempt
    tokens. Each pass goes to its turn as a copy that says whether it takes the time-driven rails
    first (`promote`), whether work is likely ready (`ready`: it claims without a look), and the
    hub's generation before it began (`seen`)."""

    execution_id: uuid.UUID
    limit: int
    queues: list[str]
    waits: bool
    gone: Callable[[], Awaitable[bool]]
    keyring: tokens.KeyRing
    ttl_seconds: int
    promote: bool = False
    ready: bool = False
    seen: int = 0


class Claims:
    """The claims of one process: waiting ones wait on `hub`; claims run on `engine`, after a look
    on `look_engine` (one statement, no transaction), in `threads` claim threads."""

    def __init__(self, hub: Hub, engine: Engine, look_engine: Engine, *, threads: int) -> None:
        self.hub, self.engine, self.look_engine = hub, engine, look_engine
        self.turns = ClaimTurns(threads)
        self.draining = False

    def drain(self) -> None:
        """This replica stops (on the event loop): no claim starts from now on (503, which a
        worker repeats, reaching another replica), and every waiting claim is answered at once
        with what it has (nothing), its client as good as gone."""
        self.draining = True
        self.hub.wake_all()

    async def claim(self, execution_id: uuid.UUID, *, limit: int, queues: list[str], wait_seconds: float,
                    gone: Callable[[], Awaitable[bool]], keyring: tokens.KeyRing, ttl_seconds: int
                    ) -> tuple[list[WorkItem], float]:
        """Up to `limit` ready task instances on `queues` for `execution_id`, and the seconds it
        waited. With `wait_seconds` it answers as soon as some are claimed within that wait
        (wait_for_work), and with nothing once `gone()` or draining."""
        if self.draining:
            refusal = AppError(503, "draining", "Draining", "This replica is stopping; claim again (another replica "
                                                              "answers).")
            refusal.headers = {"Retry-After": "1"}
            raise refusal

        async def gone_or_draining() -> bool:
            return self.draining or await gone()
        claim = PendingClaim(execution_id, limit, sorted(frozenset(queues)), wait_seconds > 0, gone_or_draining,
                             keyring, ttl_seconds)
        return await wait_for_work(self.hub, lambda: self._claim_once(claim), limit=limit, seconds=wait_seconds,
                                   gone=gone_or_draining, queues=queues, claimer=execution_id)

    async def _claim_once(self, claim: PendingClaim) -> tuple[list[WorkItem], bool]:
        """One pass of `claim`, on the event loop: its items, and whether a pool or a cap held
        ready work back. It joins this turn's claims on its queues (claim_turn runs them)."""
        # Time-driven work may be due: promote, do not look. The last claim on these queues came
        # back full: claim, do not look (if nothing is left, the claim finds no pool to lock).
        # Nothing was heard since a look found nothing: a waiting claim neither looks nor claims
        # (not even a thread), it waits.
        hub = self.hub
        promote, full = hub.take_promotion(), hub.last_claim_full(claim.queues)
        if not (promote or full) and claim.waits and hub.may_skip_look(claim.execution_id, claim.queues):
            return [], False
        started = tracing.now()
        items, held_back = await self.turns.join(frozenset(claim.queues), self.claim_turn,
                                                 replace(claim, promote=promote, ready=full, seen=hub.generation))
        if started is not None:  # tracing is on
            tracing.claimed(started, [(i.correlation.trace_id, i.correlation.dag_id, i.correlation.run_id)
                                      for i in items],
                            {"fenceline.execution_id": str(claim.execution_id)})
        return items, held_back

    def claim_turn(self, pending: list[PendingClaim]) -> list[ClaimResult]:
        """The claims of one turn on one set of queues, in a claim thread: each one's result, in
        order. The time-driven rails run first if one was told to promote, the claims that may
        find work (_look) then claim in one transaction, run again whole after a conflict with
        another writer (app/db/retries.py)."""
        results: list[ClaimResult] = [([], False) for _ in pending]
        if any(claim.promote for claim in pending):
            self._promote()
        claiming = self._look(pending, results)
        if not claiming:
            return results
        with Session(self.engine, expire_on_commit=False) as session:
            committed = retried([session], lambda: self._claim(session, pending, claiming), seen=count_conflict)
        if committed is None:
            return results
        claiming, claimed = committed
        keyring, ttl = pending[0].keyring, pending[0].ttl_seconds
        for n, got in zip(claiming, claimed, strict=True):
            if isinstance(got, AppError):
                results[n] = got
                continue
            items = []
            for ti in got.rows:
                correlation = Correlation(
                    ti_id=ti.id, dag_id=ti.dag_id, run_id=ti.run_id, task_id=ti.task_id, map_index=ti.map_index,
                    try_number=ti.try_number, attempt_epoch=ti.attempt_epoch, tenant_id=ti.tenant_id,
                    trace_id=ti.trace_id)
                token = tokens.mint_attempt(keyring, ti, pending[n].execution_id, ttl_seconds=ttl)
                items.append(WorkItem(payload=_payload(ti), correlation=correlation, attempt_token=token))
            results[n] = (items, pending[n].waits and got.held_back)
        return results

    def _promote(self) -> None:
        """The time-driven rails, in a transaction of their own, committed before the claim's:
        a claim never holds a task instance's row while it waits for the pools' lock
        (docs/decisions/0013-one-lock-order.md). Not done, it is asked of the next claim."""
        done = False
        try:
            with Session(self.engine) as session:
                def promoted() -> None:
                    dispatch.promote_due(session)
                    session.commit()
                retried([session], promoted, seen=count_conflict)
            done = True
        finally:
            if not done:
                self.hub.promotion_undone()

    def _look(self, pending: list[PendingClaim], results: list[ClaimResult]) -> list[int]:
        """The places in `pending` of the claims that may find work: told to promote, or that
        work is likely ready, or whose look (one read each, on one connection) found some. Once
        one look found work on their queues the others do not look, as their claims check their
        executions. A look that found the execution may not claim puts its refusal in `results`."""
        claiming = [n for n, claim in enumerate(pending) if claim.promote or claim.ready]
        looking = [n for n, claim in enumerate(pending) if not (claim.promote or claim.ready)]
        if looking:
            with self.look_engine.connect() as conn:
                for k, n in enumerate(looking):
                    claim = pending[n]
                    try:
                        ready = dispatch.work_ready(session=conn, execution_id=claim.execution_id, queues=claim.queues)
                    except AppError as refusal:
                        results[n] = refusal
                        continue
                    if ready:
                        claiming += looking[k:]
                        break
                    self.hub.looked_empty(claim.execution_id, claim.queues, claim.seen)
        return sorted(claiming)

    def _claim(self, session: Session, pending: list[PendingClaim], claiming: list[int]
               ) -> tuple[list[int], list[dispatch.Claimed | AppError]] | None:
        """The claims of `claiming` (places in `pending`), all in one transaction
        (dispatch.claim_each), committed only while each waiting client to be handed items is
        still there, else made again without the gone ones. Answers the places that claimed and
        what each took, or None once no claim is left."""
        while claiming:
            claims = [(pending[n].execution_id, pending[n].limit) for n in claiming]
            claimed = dispatch.claim_each(session=session, claims=claims, queues=pending[claiming[0]].queues)
            holding = [n for n, got in zip(claiming, claimed, strict=True)
                       if not isinstance(got, AppError) and got.rows and pending[n].waits]
            gone = anyio.from_thread.run(clients_gone, [pending[n] for n in holding]) if holding else []
            left = {holding[k] for k in gone}
            if not left:
                session.commit()  # the pools' lock ends here: what follows is no claim's wait
                return claiming, claimed
            session.rollback()  # nobody is there to run what was claimed for them: again without them
            claiming = [n for n in claiming if n not in left]
        return None


async def wait_for_work(hub: Hub, claim_once: Callable[[], Awaitable[tuple[list[T], bool]]], *, limit: int,
                        seconds: float, gone: Callable[[], Awaitable[bool]],
                        queues: Iterable[str] | None = None, claimer: uuid.UUID | None = None
                        ) -> tuple[list[T], float]:
    """`claim_once()` (up to `limit` on `queues` for `claimer`: its items, and whether a pool or a
    cap held ready work back) until it claims something or the wait ends (wait_ends), waiting on
    `hub` in between. Answers the items and the seconds spent waiting.

    - Nothing is claimed once `gone()` (the client left); a woken waiter that does not claim
      passes its wake on.
    - `gone()` is asked before a claim that does not wait and after each wait (before a
      waiting claim's first pass, Claims.claim_turn checks every client it hands items to).
    - An event heard during a pass makes it look again before waiting."""
    served = frozenset(queues) if queues is not None else None
    loop = asyncio.get_running_loop()
    deadline = wait_ends(loop.time(), seconds)
    woken, waited = False, 0.0
    while True:
        if (woken or seconds <= 0) and await gone():
            if woken:
                hub.wake(1, served)
            return [], waited
        seen = hub.generation
        try:
            items, blocked = await claim_once()
        except BaseException:
            if woken:
                hub.wake(1, served)
            raise
        hub.record_claim(len(items), len(items) >= limit, served)
        began = loop.time()
        remaining = deadline - began
        if items or remaining <= 0:
            return items, waited
        woken = hub.generation != seen or await hub.wait(remaining, served, blocked, claimer)
        waited += loop.time() - began
        if not woken:
            return [], waited


def wait_ends(now: float, seconds: float) -> float:
    """When a wait of `seconds` begun at `now` (the loop's monotonic clock) ends: a long one
    (ALIGNED_FROM_SECONDS or more) on the whole second before, so that an idle fleet's waits
    ending in the same second cost each process one wake-up."""
    end = now + seconds
    return math.floor(end) if seconds >= ALIGNED_FROM_SECONDS else end


class ClaimTurns:
    """The claims made with one key (a set of queues) in one turn of the event loop, run together
    in a claim thread. Up to `threads` turns run at once, on a limiter of their own rather than
    the shared threadpool's, so that a burst of claims takes neither every thread nor every
    pooled connection from the requests already holding one."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._loop: asyncio.AbstractEventLoop | None = None
        self._limiter: anyio.CapacityLimiter | None = None  # made on the event loop it limits
        self._gathering: dict[Hashable, list[tuple[Any, asyncio.Future[Any]]]] = {}
        self._running: set[asyncio.Task[Any]] = set()

    async def join(self, key: Hashable, run: Callable[[list[T]], list[Any]], claim: T) -> Any:
        """Join this turn's claims with `key` and answer this claim's item of `run(claims)`, run
        once in a claim thread for up to CLAIMS_PER_TURN of them (an item that is an exception is
        raised). A run that fails raises in every claim; a claim given up before its run starts
        is left out of it."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # the first claim, or the app serves again on a new loop
            self._loop, self._limiter = loop, anyio.CapacityLimiter(self.threads)
        claims = self._gathering.get(key)
        if claims is None or len(claims) >= CLAIMS_PER_TURN:
            claims = self._gathering[key] = []
            loop.call_soon(self._run_turn, key, claims, run)
        result = loop.create_future()
        claims.append((claim, result))
        got = await result
        if isinstance(got, BaseException):
            raise got
        return got

    def _run_turn(self, key: Hashable, claims: list[tuple[Any, "asyncio.Future[Any]"]],
                  run: Callable[[list[Any]], list[Any]]) -> None:
        if self._gathering.get(key) is claims:
            del self._gathering[key]

        async def answer() -> None:
            asking = [(claim, future) for claim, future in claims if not future.done()]  # not given up by its request
            try:
                if asking:
                    got = await anyio.to_thread.run_sync(run, [claim for claim, _ in asking], limiter=self._limiter)
                    for (_, future), one in zip(asking, got, strict=True):
                        if not future.done():
                            future.set_result(one)
            except BaseException as exc:  # noqa: B036  (every claim is answered, also when cancelled)
                for _, future in asking:
                    if not future.done():
                        future.set_result(exc)

        task = asyncio.ensure_future(answer())
        self._running.add(task)
        task.add_done_callback(self._running.discard)


async def clients_gone(pending: list[PendingClaim]) -> list[int]:
    """The places in `pending` of the claims whose clients have left."""
    return [n for n, claim in enumerate(pending) if await claim.gone()]


def _payload(ti: Any) -> dict[str, Any]:
    """The claimed row's payload. A row whose payload is no object (written past the API, by hand
    or by a restore from before restores were checked) is handed over empty, so that the agent
    refuses and reports it instead of the claim, and every claim on its queue, failing."""
    if isinstance(ti.payload, dict):
        return ti.payload
    log.error("task instance %s has a payload that is not an object (%s); handed over empty",
              ti.id, type(ti.payload).__name__)
    return {}
