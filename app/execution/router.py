"""HTTP for dispatch, agent writes, observations, attempts and sweeps."""

import uuid

from fastapi import APIRouter, Request

from app.auth import tokens
from app.auth.deps import AttemptDep, OperatorDep, WorkerDep, installation
from app.db import SessionDep
from app.errors import problems
from app.execution import attempts, dispatch, fence, observations, reapers
from app.execution.schemas import (
    AttemptPublic, AttemptsPublic, AttemptStatus, ClaimRequest, Correlation, ObservationIn, ObservationResult,
    RenewedToken, Report, SweepResult, WorkItem, WorkItems,
)
from app.orchestration.models import TaskInstance
from app.orchestration.rails import Backoff
from app.orchestration.runs import get_task_instance

router = APIRouter(tags=["execution"], responses=problems(401, 403, 422))
STALE = problems(404, 409)


def backoff(request: Request) -> Backoff:
    return Backoff.from_settings(request.app.state.settings)


def status(ti: TaskInstance) -> AttemptStatus:
    return AttemptStatus(ti_id=ti.id, state=ti.state, try_number=ti.try_number, attempt_epoch=ti.attempt_epoch)


@router.post("/v1/dispatch/claim", responses=problems(409))
def claim(body: ClaimRequest, session: SessionDep, request: Request, execution_id: WorkerDep) -> WorkItems:
    """Claim up to `limit` ready task instances for the calling execution (worker token)."""
    settings = request.app.state.settings
    items = []
    for ti, run in dispatch.claim(session=session, execution_id=execution_id, limit=body.limit):
        correlation = Correlation(
            ti_id=ti.id, dag_id=ti.dag_id, run_id=ti.run_id, task_id=ti.task_id, map_index=ti.map_index,
            try_number=ti.try_number, attempt_epoch=ti.attempt_epoch, tenant_id=run.tenant_id, trace_id=run.trace_id)
        token = tokens.mint_attempt(installation(request).keyring, {
            "sub": str(ti.id), "dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id,
            "map_index": ti.map_index, "try_number": ti.try_number, "execution_id": str(execution_id),
            "attempt_epoch": ti.attempt_epoch,
        }, ttl_seconds=settings.attempt_token_ttl_seconds)
        items.append(WorkItem(payload=ti.payload, correlation=correlation, attempt_token=token))
    return WorkItems(items=items)


@router.post("/v1/attempts/report", responses=STALE)
def report(body: Report, session: SessionDep, request: Request, token: AttemptDep) -> AttemptStatus:
    """Report `running` or the attempt's outcome (settle fence)."""
    return status(fence.report(session=session, token=token, body=body, backoff=backoff(request)))


@router.post("/v1/attempts/heartbeat", responses=STALE)
def heartbeat(session: SessionDep, token: AttemptDep) -> AttemptStatus:
    return status(fence.heartbeat(session=session, token=token))


@router.get("/v1/attempts/live", responses=STALE)
def live(session: SessionDep, token: AttemptDep) -> AttemptStatus:
    """200 while the token's attempt is the live one; 409 stale-report (should_terminate) after."""
    return status(fence.live_attempt(session, token))


@router.post("/v1/attempts/release", responses=STALE)
def release(session: SessionDep, token: AttemptDep) -> AttemptStatus:
    """Hand back a claim before user code started: requeued, no try or infra budget spent."""
    return status(fence.release(session=session, token=token))


@router.post("/v1/auth/renew", tags=["auth"], responses=STALE)
def renew(session: SessionDep, request: Request, token: AttemptDep) -> RenewedToken:
    """A fresh attempt token with every claim preserved verbatim (attempt_epoch absent, 0 or N
    alike); refused for a superseded or finished attempt, and past the lifetime ceiling."""
    settings = request.app.state.settings
    return RenewedToken(attempt_token=fence.renew(
        session=session, token=token, keyring=installation(request).keyring,
        ttl_seconds=settings.attempt_token_ttl_seconds,
        max_lifetime_seconds=settings.max_attempt_credential_lifetime_seconds))


@router.post("/v1/observations", responses=STALE)
def observe(body: ObservationIn, session: SessionDep, request: Request, _: OperatorDep) -> ObservationResult:
    """Record a substrate observation; an explicit outcome settles through the fence."""
    ti, recorded, settled = observations.observe(session=session, observation=body, backoff=backoff(request))
    return ObservationResult(recorded=recorded, settled=settled, state=ti.state)


@router.get("/v1/task-instances/{ti_id}/attempts", responses=problems(404))
def list_attempts(ti_id: uuid.UUID, session: SessionDep, _: OperatorDep) -> AttemptsPublic:
    """Every attempt epoch of the task instance, in (try, epoch) order."""
    get_task_instance(session=session, ti_id=ti_id)
    return AttemptsPublic(items=[AttemptPublic.model_validate(a, from_attributes=True)
                                 for a in attempts.list_attempts(session=session, ti_id=ti_id)])


@router.post("/v1/admin/reap", tags=["admin"])
def reap(session: SessionDep, request: Request, _: OperatorDep) -> SweepResult:
    """Run one reaper sweep now."""
    marked = reapers.sweep(session=session, thresholds=reapers.Thresholds.from_settings(request.app.state.settings),
                           backoff=backoff(request))
    return SweepResult(marked=marked or {}, swept=marked is not None)
