"""HTTP for dispatch, agent writes, observations, attempts, sweeps and the operator rails."""

import uuid
from dataclasses import dataclass

import anyio
from fastapi import Request
from sqlalchemy import Engine
from sqlmodel import Session

from app import wakeups
from app.auth import tokens
from app.auth.deps import AttemptDep, OperatorDep, WorkerDep, installation
from app.errors import AppError
from app.execution import attempts, dispatch, fence, observations, operator, reapers
from app.execution.schemas import (
    AttemptPublic,
    AttemptsPublic,
    AttemptStatus,
    ClaimRequest,
    Correlation,
    ObservationIn,
    ObservationResult,
    RenewedToken,
    Report,
    StaleExecution,
    StaleReport,
    SweepResult,
    WorkItem,
    WorkItems,
)
from app.logs.retention import Retention
from app.orchestration import runs
from app.orchestration.models import TaskInstance
from app.orchestration.outcomes import Backoff
from app.orchestration.schemas import MarkRequest, RunPublic, TaskInstancePublic, run_public, ti_public
from app.telemetry import metrics, tracing
from app.web.deps import SessionDep, SingleStatementDep, StoreDep, commit
from app.web.problems import problems, refusals
from app.web.routes import Router

router = Router(tags=["execution"], responses=problems(401, 403, 422))
STALE = refusals(StaleReport)


def backoff(request: Request) -> Backoff:
    """The retry policy the application built at its start (app/main.py)."""
    return request.app.state.backoff


def status(ti: TaskInstance) -> AttemptStatus:
    return AttemptStatus(ti_id=ti.id, state=ti.state, try_number=ti.try_number, attempt_epoch=ti.attempt_epoch)


@router.post("/v1/dispatch/claim", responses=refusals(StaleExecution))
async def claim(body: ClaimRequest, request: Request, execution_id: WorkerDep) -> WorkItems:
    """Claim up to `limit` ready task instances on `queues` for the calling execution (worker
    token); with `wait_seconds`, wait up to that long for work on those queues (answered as
    soon as some is claimed; a wait of 10 s or more ends on a whole second, up to a second
    early), holding neither a thread nor a database connection while waiting."""
    hub: wakeups.Hub = request.app.state.wakeups
    waits, served = body.wait_seconds > 0, frozenset(body.queues)

    async def attempt() -> tuple[list[WorkItem], bool]:
        # Time-driven work may be due: make it ready, do not look. The last claim on these
        # queues came back full: claim, do not look (if nothing is left, the claim finds no pool
        # to lock). A claim that waits, when nothing was heard since its last look found
        # nothing: neither look nor claim (not even a thread), wait.
        promote, busy = hub.take_promotion(), hub.busy(body.queues)
        if not (promote or busy) and waits and hub.quiet(execution_id, body.queues):
            return [], False
        started = tracing.now()
        items, held_back = await hub.together(served, claim_now, Ask(
            request, execution_id, body.limit, sorted(served), waits, promote, busy, hub.generation))
        if started is not None:  # tracing is on
            tracing.claimed(started, [i.correlation.trace_id for i in items],
                            {"fenceline.execution_id": str(execution_id)})
        return items, held_back

    items = await wakeups.wait_for_work(hub, attempt, limit=body.limit, seconds=body.wait_seconds,
                                        gone=request.is_disconnected, queues=body.queues, claimer=execution_id)
    metrics.count_claim(len(items))
    return WorkItems(items=items)


@dataclass(frozen=True)
class Ask:
    """One claim attempt: for `execution_id`, up to `limit` on `queues`; whether its client
    `waits` (then it may have left), whether it was told to `promote` or that work is likely
    `ready` (no look first), and the hub's generation `seen` before it began."""

    request: Request
    execution_id: uuid.UUID
    limit: int
    queues: list[str]
    waits: bool
    promote: bool
    ready: bool
    seen: int


def claim_now(asks: list[Ask]) -> list[tuple[list[WorkItem], bool] | AppError]:
    """Claim attempts on the same queues begun together (in a claim thread of the hub's; its
    `together`): each one told neither to promote nor that work is likely ready first looks, in
    a read that locks nothing; then every one that may find work claims, all in one
    transaction (dispatch.claim_each), committed only while each client to be handed items is
    still there (a waiting claim's client may have left: the transaction is made again without
    it). Answers, in order, each one's items and, when it claimed nothing and waits, whether
    ready work on its queues was held back by a pool or a cap; or its refusal."""
    state = asks[0].request.app.state
    hub: wakeups.Hub = state.wakeups
    answers: list[tuple[list[WorkItem], bool] | AppError] = [([], False) for _ in asks]
    promote = any(ask.promote for ask in asks)
    committed = False
    try:
        claiming = _looked(asks, answers, state.single_statement_engine, hub)
        if not claiming:
            return answers
        with Session(state.engine, expire_on_commit=False) as session:
            while claiming:
                claimed = dispatch.claim_each(session=session, claims=[(asks[n].execution_id, asks[n].limit)
                                                                       for n in claiming],
                                              queues=asks[claiming[0]].queues, promote=promote)
                holding = [n for n, got in zip(claiming, claimed, strict=True)
                           if not isinstance(got, AppError) and got.rows and asks[n].waits]
                gone = anyio.from_thread.run(departed, [asks[n] for n in holding]) if holding else []
                left = {holding[k] for k in gone}
                if not left:
                    session.commit()  # the pools' lock ends here: what follows is no claim's wait
                    committed = True
                    break
                session.rollback()  # nobody is there to run what was claimed for them: again without them
                claiming = [n for n in claiming if n not in left]
    finally:
        if promote and not committed:
            hub.promotion_undone()
    if not committed:
        return answers
    keyring, ttl = installation(asks[0].request).keyring, state.settings.attempt_token_ttl_seconds
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
            items.append(WorkItem(payload=ti.payload, correlation=correlation, attempt_token=token))
        answers[n] = (items, asks[n].waits and got.held_back)
    return answers


def _looked(asks: list[Ask], answers: list[tuple[list[WorkItem], bool] | AppError], engine: Engine,
            hub: wakeups.Hub) -> list[int]:
    """The places in `asks` of those that may find work: told to promote, or that work is
    likely ready, or whose look (one read, on one connection for all) found some; a look that
    found the execution may not claim puts its refusal in `answers`. Once one look found work
    on their queues, the others do not look (their claims check their executions)."""
    claiming = [n for n, ask in enumerate(asks) if ask.promote or ask.ready]
    looking = [n for n, ask in enumerate(asks) if not (ask.promote or ask.ready)]
    if looking:
        with engine.connect() as conn:
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
                hub.looked_empty(ask.execution_id, ask.queues, ask.seen)
    return sorted(claiming)


async def departed(asks: list[Ask]) -> list[int]:
    """The places in `asks` of those whose clients have left."""
    return [n for n, ask in enumerate(asks) if await ask.request.is_disconnected()]


@router.post("/v1/attempts/report", responses=STALE)
def report(body: Report, session: SessionDep, request: Request, token: AttemptDep) -> AttemptStatus:
    """Report `running` or the attempt's outcome (settle fence)."""
    reported = status(fence.report(session=session, key=token.key, body=body, backoff=backoff(request)))
    commit(session)
    metrics.reports.labels(body.state).inc()
    return reported


@router.post("/v1/attempts/heartbeat", responses=STALE)
def heartbeat(session: SingleStatementDep, token: AttemptDep) -> AttemptStatus:
    """Stamp the attempt's heartbeat (relaxed rule): one guarded statement, committed on its own."""
    return status(fence.heartbeat(session=session, token=token))


@router.get("/v1/attempts/live", responses=STALE)
def live(session: SingleStatementDep, token: AttemptDep) -> AttemptStatus:
    """200 while the token's attempt is the live one; 409 stale-report (should_terminate) after."""
    return status(fence.live_attempt(session, token))


@router.post("/v1/attempts/release", responses=STALE)
def release(session: SessionDep, token: AttemptDep) -> AttemptStatus:
    """Hand back a claim before user code started: requeued, no try or infra budget spent."""
    return status(fence.release(session=session, key=token.key))


@router.post("/v1/auth/renew", tags=["auth"], responses=STALE)
def renew(session: SingleStatementDep, request: Request, token: AttemptDep) -> RenewedToken:
    """A fresh attempt token with every claim preserved verbatim (attempt_epoch absent, 0 or N
    alike); refused for a superseded or finished attempt, and past the lifetime ceiling."""
    settings = request.app.state.settings
    renewed = fence.renew(session=session, token=token, keyring=installation(request).keyring,
                          ttl_seconds=settings.attempt_token_ttl_seconds,
                          max_lifetime_seconds=settings.max_attempt_credential_lifetime_seconds)
    return RenewedToken(attempt_token=renewed)


@router.post("/v1/observations", responses={**refusals(StaleReport), **problems(404)})  # 404: no such TI
def observe(body: ObservationIn, session: SessionDep, request: Request, _: OperatorDep) -> ObservationResult:
    """Record a substrate observation; an explicit outcome settles through the fence."""
    ti, recorded, settled = observations.observe(session=session, observation=body, backoff=backoff(request))
    return ObservationResult(recorded=recorded, settled=settled, state=ti.state)


@router.get("/v1/task-instances/{ti_id}/attempts", responses=problems(404))
def list_attempts(ti_id: uuid.UUID, session: SessionDep, _: OperatorDep) -> AttemptsPublic:
    """Every attempt epoch of the task instance, in (try, epoch) order."""
    runs.get_task_instance(session=session, ti_id=ti_id)
    return AttemptsPublic(items=[AttemptPublic.model_validate(a, from_attributes=True)
                                 for a in attempts.list_attempts(session=session, ti_id=ti_id)])


@router.post("/v1/admin/reap", tags=["admin"])
def reap(session: SessionDep, store: StoreDep, request: Request, _: OperatorDep) -> SweepResult:
    """Run one reaper sweep now (retention included, when it is set)."""
    settings = request.app.state.settings
    marked = reapers.sweep(session=session, thresholds=reapers.Thresholds.from_settings(settings),
                           backoff=backoff(request), retention=Retention.from_settings(settings, store))
    return SweepResult(marked=marked or {}, swept=marked is not None)


# --- the operator rails -------------------------------------------------------------------------
# Served here, beside the service that closes the attempt records they fence off; tagged
# `orchestration` as they always were, so their operation ids stay the same.
rails_router = Router(prefix="/v1", tags=["orchestration"], responses=problems(401, 403, 422))


def _moved(ti: TaskInstance | None) -> TaskInstance:
    if ti is None:
        raise AppError(409, "task-instance-moved", "Task instance moved",
                       "The task instance changed while the request ran; read it and retry.")
    return ti


@rails_router.post("/runs/{dag_id}/{run_id}/clear-failed", responses=problems(404))
def clear_failed(dag_id: str, run_id: str, session: SessionDep, _: OperatorDep) -> RunPublic:
    """Clear every failed, infra_failed and upstream_failed task instance of the run."""
    run = runs.get_run(session=session, dag_id=dag_id, run_id=run_id)
    operator.clear_failed(session=session, dag_run_id=run.id)
    return run_public(*runs.get_run_with_task_instances(session=session, dag_id=dag_id, run_id=run_id))


@rails_router.post("/task-instances/{ti_id}/clear", responses=problems(404, 409))
def clear_task_instance(ti_id: uuid.UUID, session: SessionDep, _: OperatorDep) -> TaskInstancePublic:
    """Start a new try (any in-flight attempt is fenced off and told to terminate)."""
    ti = runs.get_task_instance(session=session, ti_id=ti_id)
    return ti_public(_moved(operator.clear(session=session, ti=ti)))


@rails_router.post("/task-instances/{ti_id}/mark", responses=problems(404, 409))
def mark_task_instance(ti_id: uuid.UUID, body: MarkRequest, session: SessionDep, _: OperatorDep) -> TaskInstancePublic:
    """Mark success or failed (any in-flight attempt is fenced off and told to terminate)."""
    ti = runs.get_task_instance(session=session, ti_id=ti_id)
    return ti_public(_moved(operator.mark(session=session, ti=ti, state=body.state)))
