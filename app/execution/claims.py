"""Claims, waiting or not (contract 2.2; docs/decisions/0006-waiting-claims.md): each attempt
of a claim either waits on the hub (app/execution/hub.py) or joins the batch of attempts on its
queues begun in the same turn of the event loop, which looks and claims (dispatch.claim_each)
in one claim thread and one transaction."""

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
from sqlalchemy import Engine
from sqlmodel import Session

from app.auth import tokens
from app.db.retries import retried
from app.errors import AppError
from app.execution import dispatch
from app.execution.hub import Hub, wait_for_work
from app.execution.schemas import Correlation, WorkItem
from app.telemetry import tracing
from app.telemetry.metrics import count_conflict

log = logging.getLogger("fenceline.claims")
A = TypeVar("A")
# The most claim attempts one batch takes (its transaction holds the pools' lock for all of
# them: beyond this, the next ones go in a batch of their own, answered sooner).
TOGETHER_AT_MOST = 16
Answer = tuple[list[WorkItem], bool] | AppError


class Batches:
    """Asks made with the same key in one turn of the event loop, run together in a claim
    thread: up to `threads` batches at once, on a limiter of their own (not the shared
    threadpool's, so that a burst of claims takes neither every thread nor every pooled
    connection from the requests already holding one)."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._loop: asyncio.AbstractEventLoop | None = None
        self._limiter: anyio.CapacityLimiter | None = None  # made on the event loop it limits
        self._gathering: dict[Hashable, list[tuple[Any, asyncio.Future[Any]]]] = {}
        self._running: set[asyncio.Task[Any]] = set()

    async def together(self, key: Hashable, run: Callable[[list[A]], list[Any]], ask: A) -> Any:
        """`run(asks)`, in a claim thread, once for every ask made with this `key` in this turn
        (up to TOGETHER_AT_MOST): each ask is answered with its item of what `run` answers
        (raised, if it is an exception); a run that fails fails every ask; an ask given up
        before its run starts is left out of it."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # the first ask, or the app serves again on a new loop
            self._loop, self._limiter = loop, anyio.CapacityLimiter(self.threads)
        asks = self._gathering.get(key)
        if asks is None or len(asks) >= TOGETHER_AT_MOST:
            asks = self._gathering[key] = []
            loop.call_soon(self._run_together, key, asks, run)
        answer = loop.create_future()
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
                    got = await anyio.to_thread.run_sync(run, [ask for ask, _ in asking], limiter=self._limiter)
                    for (_, future), one in zip(asking, got, strict=True):
                        if not future.done():
                            future.set_result(one)
            except BaseException as exc:  # noqa: B036  (every ask is answered, also when cancelled)
                for _, future in asking:
                    if not future.done():
                        future.set_result(exc)

        task = asyncio.ensure_future(answer())
        self._running.add(task)
        task.add_done_callback(self._running.discard)


@dataclass(frozen=True)
class Ask:
    """One claim attempt: for `execution_id`, up to `limit` on `queues`; whether its client
    `waits` (then it may have left: `gone()`), whether it was told to `promote` or that work is
    likely `ready` (no look first), the hub's generation `seen` before it began, and how its
    attempt tokens are minted (`keyring`, `ttl_seconds`)."""

    execution_id: uuid.UUID
    limit: int
    queues: list[str]
    waits: bool
    promote: bool
    ready: bool
    seen: int
    gone: Callable[[], Awaitable[bool]]
    keyring: tokens.KeyRing
    ttl_seconds: int


class Claims:
    """The claims of one process: waiting ones wait on `hub`; attempts claim on `engine`, after
    a look on `look_engine` (one statement, no transaction), in `threads` claim threads."""

    def __init__(self, hub: Hub, engine: Engine, look_engine: Engine, *, threads: int) -> None:
        self.hub, self.engine, self.look_engine = hub, engine, look_engine
        self.batches = Batches(threads)
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
        """Up to `limit` ready task instances on `queues` for `execution_id`; with
        `wait_seconds`, as soon as some are claimed within that wait (hub.wait_for_work), and
        nothing once `gone()` or draining; and the seconds it waited."""
        if self.draining:
            refusal = AppError(503, "draining", "Draining", "This replica is stopping; claim again (another replica "
                                                              "answers).")
            refusal.headers = {"Retry-After": "1"}
            raise refusal
        hub, waits, served = self.hub, wait_seconds > 0, frozenset(queues)

        async def gone_or_draining() -> bool:
            return self.draining or await gone()

        async def attempt() -> tuple[list[WorkItem], bool]:
            # Time-driven work may be due: make it ready, do not look. The last claim on these
            # queues came back full: claim, do not look (if nothing is left, the claim finds no
            # pool to lock). A claim that waits, when nothing was heard since its last look found
            # nothing: neither look nor claim (not even a thread), wait.
            promote, busy = hub.take_promotion(), hub.busy(queues)
            if not (promote or busy) and waits and hub.quiet(execution_id, queues):
                return [], False
            started = tracing.now()
            items, held_back = await self.batches.together(served, self.claim_now, Ask(
                execution_id, limit, sorted(served), waits, promote, busy, hub.generation, gone_or_draining, keyring,
                ttl_seconds))
            if started is not None:  # tracing is on
                tracing.claimed(started, [(i.correlation.trace_id, i.correlation.dag_id, i.correlation.run_id)
                                          for i in items],
                                {"fenceline.execution_id": str(execution_id)})
            return items, held_back

        return await wait_for_work(hub, attempt, limit=limit, seconds=wait_seconds, gone=gone_or_draining,
                                   queues=queues, claimer=execution_id)

    def claim_now(self, asks: list[Ask]) -> list[Answer]:
        """Claim attempts on the same queues begun together (in a claim thread: Batches): the
        time-driven rails first when one was told to promote (_promote); those told neither to
        promote nor that work is likely ready look (_looked); then every one that may find work
        claims (_claim), the transaction run again whole after a conflict with another writer
        (app/db/retries.py). Answers, in order, each one's items and, when it claimed
        nothing and waits, whether ready work was held back by a pool or a cap; or its refusal."""
        answers: list[Answer] = [([], False) for _ in asks]
        if any(ask.promote for ask in asks):
            self._promote()
        claiming = self._looked(asks, answers)
        if not claiming:
            return answers
        with Session(self.engine, expire_on_commit=False) as session:
            took = retried([session], lambda: self._claim(session, asks, claiming), seen=count_conflict)
        if took is None:
            return answers
        claiming, claimed = took
        keyring, ttl = asks[0].keyring, asks[0].ttl_seconds
        for n, got in zip(claiming, claimed, strict=True):
            if isinstance(got, AppError):
                answers[n] = got
                continue
            items = []
            for ti in got.rows:
                correlation = Correlation(
                    ti_id=ti.id, dag_id=ti.dag_id, run_id=ti.run_id, task_id=ti.task_id, map_index=ti.map_index,
                    try_number=ti.try_number, attempt_epoch=ti.attempt_epoch, tenant_id=ti.tenant_id,
                    trace_id=ti.trace_id)
                token = tokens.mint_attempt(keyring, ti, asks[n].execution_id, ttl_seconds=ttl)
                items.append(WorkItem(payload=_payload(ti), correlation=correlation, attempt_token=token))
            answers[n] = (items, asks[n].waits and got.held_back)
        return answers

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

    def _claim(self, session: Session, asks: list[Ask], claiming: list[int]
               ) -> tuple[list[int], list[dispatch.Claimed | AppError]] | None:
        """The claims of `claiming` (places in `asks`), all in one transaction (dispatch.claim_each),
        committed only while each waiting client to be handed items is still there (else made
        again without the gone ones): answers the places that claimed and what each took, or
        None once no claim is left."""
        while claiming:
            claimed = dispatch.claim_each(session=session, claims=[(asks[n].execution_id, asks[n].limit)
                                                                   for n in claiming], queues=asks[claiming[0]].queues)
            holding = [n for n, got in zip(claiming, claimed, strict=True)
                       if not isinstance(got, AppError) and got.rows and asks[n].waits]
            gone = anyio.from_thread.run(departed, [asks[n] for n in holding]) if holding else []
            left = {holding[k] for k in gone}
            if not left:
                session.commit()  # the pools' lock ends here: what follows is no claim's wait
                return claiming, claimed
            session.rollback()  # nobody is there to run what was claimed for them: again without them
            claiming = [n for n in claiming if n not in left]
        return None

    def _looked(self, asks: list[Ask], answers: list[Answer]) -> list[int]:
        """The places in `asks` of those that may find work: told to promote, or that work is
        likely ready, or whose look (one read, on one connection for all) found some; a look that
        found the execution may not claim puts its refusal in `answers`. Once one look found work
        on their queues, the others do not look (their claims check their executions)."""
        claiming = [n for n, ask in enumerate(asks) if ask.promote or ask.ready]
        looking = [n for n, ask in enumerate(asks) if not (ask.promote or ask.ready)]
        if looking:
            with self.look_engine.connect() as conn:
                for k, n in enumerate(looking):
                    ask = asks[n]
                    try:
                        ready = dispatch.work_ready(session=conn, execution_id=ask.execution_id, queues=ask.queues)
                    except AppError as refusal:
                        answers[n] = refusal
                        continue
                    if ready:
                        claiming += looking[k:]
                        break
                    self.hub.looked_empty(ask.execution_id, ask.queues, ask.seen)
        return sorted(claiming)


async def departed(asks: list[Ask]) -> list[int]:
    """The places in `asks` of those whose clients have left."""
    return [n for n, ask in enumerate(asks) if await ask.gone()]


def _payload(ti: Any) -> dict[str, Any]:
    """The claimed row's payload; a row whose payload is no object (written past the API, by hand
    or by a restore from before restores were checked) is handed over empty, so the agent
    refuses it and reports it, instead of the claim, and every claim on its queue, failing."""
    if isinstance(ti.payload, dict):
        return ti.payload
    log.error("task instance %s has a payload that is not an object (%s); handed over empty",
              ti.id, type(ti.payload).__name__)
    return {}
