"""HTTP for dispatch, agent writes, observations, attempts, sweeps and the operator rails."""

import uuid
from typing import get_args

import anyio
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from pydantic_core import to_json
from sqlmodel import Session

from app.auth.deps import AttemptDep, OperatorDep, OperatorOrAttemptDep, WorkerDep, installation
from app.errors import forbidden
from app.execution import attempts, batch, fence, observations, operator, reapers
from app.execution.claims import Claims
from app.execution.schemas import (
    AttemptPublic,
    AttemptsPublic,
    AttemptStatus,
    BatchEntry,
    BatchRequest,
    BatchResults,
    ClaimRequest,
    FencePublic,
    FenceRefusal,
    ObservationIn,
    ObservationResult,
    RailRefusal,
    RenewedToken,
    Report,
    StaleExecution,
    StaleReport,
    SweepResult,
    WorkItems,
)
from app.orchestration import runs
from app.orchestration.outcomes import InfraBackoff
from app.orchestration.schemas import MarkRequest, RunPublic, TaskInstancePublic, run_public, ti_public
from app.telemetry import metrics, tracing
from app.web.deps import JsonObjectDep, SessionDep, SingleStatementDep, commit
from app.web.problems import problems, refusals, schema_ref
from app.web.routes import Router, retrying

router = Router(tags=["execution"], responses=problems(401, 403, 422))
STALE = refusals(StaleReport)


def backoff(request: Request) -> InfraBackoff:
    """The retry policy the application built at its start (app/main.py)."""
    return request.app.state.backoff


status = AttemptStatus.of


@router.post("/v1/dispatch/claim", responses={**refusals(StaleExecution), **problems(503)})
async def claim(body: ClaimRequest, request: Request, execution_id: WorkerDep) -> WorkItems:
    """Claim up to `limit` ready task instances on `queues` for the calling execution (worker
    token); with `wait_seconds`, wait up to that long for work on those queues (answered as
    soon as some is claimed; a wait of 10 s or more ends on a whole second, up to a second
    early), holding neither a thread nor a database connection while waiting."""
    state = request.app.state
    claims: Claims = state.claims
    with metrics.claims_in_flight.track_inprogress():
        items, waited = await claims.claim(
            execution_id, limit=body.limit, queues=body.queues, wait_seconds=body.wait_seconds,
            gone=request.is_disconnected, keyring=installation(request).keyring,
            ttl_seconds=state.settings.attempt_token_ttl_seconds)
    metrics.count_claim(len(items), waited)
    request.state.waited_seconds = waited  # not latency (app/telemetry/observe.py)
    return WorkItems(items=items)


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


schema_ref(BatchEntry)  # what an entry of a batch holds, among the document's schemas


# A batch is tens of milliseconds of CPU: a few run at once per process, and the others wait their
# turn holding neither a thread nor a connection, which bounds both.
BATCHES_AT_ONCE = 4
_batch_turns: list[anyio.CapacityLimiter] = []


def batch_turns() -> anyio.CapacityLimiter:
    if not _batch_turns:  # made in the event loop that serves (one per process)
        _batch_turns.append(anyio.CapacityLimiter(BATCHES_AT_ONCE))
    return _batch_turns[0]


# The body is the one the ingress parsed off the event loop (500 entries' tokens are some
# 300 KB), and the answer is encoded once from the results as they are: FastAPI's own parse and
# response model would do both again, on the loop (docs/performance.md, "Batches").
BATCH_BODY = {"requestBody": {"required": True, "content": {"application/json": {"schema": schema_ref(BatchRequest)}}}}


@router.post("/v1/attempts/batch", response_model=BatchResults, openapi_extra=BATCH_BODY,
             responses=problems(413))  # 413: more than 500 entries, nothing applied
async def attempts_batch(request: Request, execution_id: WorkerDep, document: JsonObjectDep,
                         session: SessionDep) -> Response:
    """Many attempts' writes in one request (contract 2.11), under the worker token of the
    execution they are bound to.

    Up to 500 entries, each a `heartbeat`, a `report` or a `log` append with its attempt's own
    token and its single request's body (BatchEntry). Each entry is answered, in order, exactly
    as its single request would be (`status`, and as `body` an AttemptStatus, `{size}` or a
    problem with its `should_terminate`), and an entry whose token is of another execution gets
    403. One entry's refusal changes nothing for another, and a batch sent again after a lost
    answer changes nothing twice."""
    try:
        entries = BatchRequest.model_validate(document).entries
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]) \
            from None
    state = request.app.state
    context = batch.BatchContext(execution_id, installation(request).keyring,
                                 state.settings.accept_legacy_attempt_tokens, backoff(request), state.append_log_entry)

    def applied(session: Session) -> list[batch.Result]:
        results = batch.apply(session=session, context=context, entries=entries)
        commit(session)
        return results

    started = tracing.now()
    # Run again whole after a conflict with another writer (app/web/routes.py retrying).
    results = await anyio.to_thread.run_sync(retrying, applied, session, limiter=batch_turns())
    metrics.count_batch(entries, results)
    tracing.batch_entries(started, entries, [r.status for r in results])
    # Each result is the answer of a route whose own schema it follows.
    return Response(to_json({"results": [{"status": r.status, "body": r.body} for r in results]}),
                    media_type="application/json")


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


@router.get("/v1/task-instances/{ti_id}/fence", responses=refusals(FenceRefusal))
def read_fence(ti_id: uuid.UUID, session: SessionDep, token: OperatorOrAttemptDep) -> FencePublic:
    """The task instance's fencing token now, for a store that prefers asking to remembering
    (contract 11.4): an operator's token, or an attempt token of this very task instance, a
    superseded attempt's included (it learns here that it is)."""
    if token is not None and token.ti_id != ti_id:
        raise forbidden("An attempt token reads the fence of its own task instance only.")
    ti = runs.get_task_instance(session=session, ti_id=ti_id)
    return FencePublic(try_number=ti.try_number, attempt_epoch=ti.attempt_epoch, fencing_token=ti.attempt_epoch,
                       state=ti.state)


@router.post("/v1/admin/reap", tags=["admin"])
def reap(session: SessionDep, request: Request, _: OperatorDep) -> SweepResult:
    """Run one reaper sweep now (retention included, when it is set)."""
    settings = request.app.state.settings
    marked = reapers.sweep(session=session, thresholds=reapers.Thresholds.from_settings(settings),
                           backoff=backoff(request), retention=request.app.state.retention,
                           reach=request.app.state.database_reach)
    return SweepResult(marked=marked or {}, swept=marked is not None)


# --- the operator rails -------------------------------------------------------------------------
# Served here, beside the service that closes the attempt records they fence off; tagged
# `orchestration` as they always were, so their operation ids stay the same.
rails_router = Router(prefix="/v1", tags=["orchestration"], responses=problems(401, 403, 422))


RAIL_REFUSALS = {**problems(404), **refusals(RailRefusal)}


@rails_router.post("/runs/{dag_id}/{run_id}/clear-failed", responses=problems(404))
def clear_failed(dag_id: str, run_id: str, session: SessionDep, _: OperatorDep) -> RunPublic:
    """Clear every failed, infra_failed, upstream_failed and skipped task instance of the run
    (clearing a cancelled run's resumes it)."""
    run = runs.get_run(session=session, dag_id=dag_id, run_id=run_id)
    operator.clear_failed(session=session, dag_run_id=run.id)
    return run_public(*runs.get_run_with_task_instances(session=session, dag_id=dag_id, run_id=run_id))


@rails_router.post("/runs/{dag_id}/{run_id}/cancel", responses=RAIL_REFUSALS)
def cancel_run(dag_id: str, run_id: str, session: SessionDep, _: OperatorDep) -> RunPublic:
    """Cancel the run: each task instance in flight ends failed (its worker is told to
    terminate at its next call), each not started ends skipped, and the run ends failed.
    409 run-finished if nothing of it is unfinished."""
    run = runs.get_run(session=session, dag_id=dag_id, run_id=run_id)
    operator.cancel(session=session, run=run)
    return run_public(*runs.get_run_with_task_instances(session=session, dag_id=dag_id, run_id=run_id))


@rails_router.post("/task-instances/{ti_id}/clear", responses=RAIL_REFUSALS)
def clear_task_instance(ti_id: uuid.UUID, session: SessionDep, _: OperatorDep) -> TaskInstancePublic:
    """Start a new try (any in-flight attempt is fenced off and told to terminate)."""
    ti = runs.get_task_instance(session=session, ti_id=ti_id)
    return ti_public(operator.require_moved(operator.clear(session=session, ti=ti)))


@rails_router.post("/task-instances/{ti_id}/mark", responses=RAIL_REFUSALS)
def mark_task_instance(ti_id: uuid.UUID, body: MarkRequest, session: SessionDep, _: OperatorDep) -> TaskInstancePublic:
    """Mark success or failed (any in-flight attempt is fenced off and told to terminate)."""
    ti = runs.get_task_instance(session=session, ti_id=ti_id)
    return ti_public(operator.require_moved(operator.mark_state(session=session, ti=ti, state=body.state)))


@rails_router.post("/task-instances/{ti_id}/replace", responses=RAIL_REFUSALS)
def replace_task_instance(ti_id: uuid.UUID, session: SessionDep, _: OperatorDep) -> TaskInstancePublic:
    """Re-place now: the attempt in flight ends unexecutable (reason operator_replaced; its
    worker is told to terminate) and the same try is scheduled again at once, on the infra
    budget (infra_failed once that is spent). 409 task-instance-not-in-flight if none is."""
    ti = runs.get_task_instance(session=session, ti_id=ti_id)
    return ti_public(operator.replace(session=session, ti=ti))


# Series at 0 from the start: every outcome a report carries, and every route that may refuse a
# write as stale (the logs append is app/logs/router.py's; tests/telemetry/test_metrics.py holds this list
# to the routes whose documented 409 is a stale report).
metrics.zeroed(metrics.reports, outcome=get_args(Report.model_fields["state"].annotation))
metrics.zeroed(metrics.stale_reports, route=(
    "/v1/attempts/report", "/v1/attempts/heartbeat", "/v1/attempts/live", "/v1/attempts/release", "/v1/auth/renew",
    "/v1/observations", "/v1/attempts/logs", "/v1/attempts/batch"))
