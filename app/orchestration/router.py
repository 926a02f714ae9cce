"""HTTP for runs and task instances, and the operator rails (clear, clear failed, mark)."""

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from app.auth.deps import OperatorDep
from app.db import SessionDep
from app.errors import AppError, problems
from app.execution import operator as operator_rails
from app.orchestration import runs
from app.orchestration.models import DagRun, TaskInstance
from app.orchestration.schemas import MarkRequest, RunCreate, RunPublic, RunsPublic, TaskInstancePublic

router = APIRouter(prefix="/v1", tags=["orchestration"], responses=problems(401, 403, 422))


def ti_public(ti: TaskInstance) -> TaskInstancePublic:
    return TaskInstancePublic(
        ti_id=ti.id, dag_id=ti.dag_id, run_id=ti.run_id, task_id=ti.task_id, map_index=ti.map_index,
        state=ti.state, try_number=ti.try_number, max_tries=ti.max_tries, attempt_epoch=ti.attempt_epoch,
        infra_attempts=ti.infra_attempts, max_infra_attempts=ti.max_infra_attempts,
        last_failure_kind=ti.last_failure_kind, last_failure_reason=ti.last_failure_reason,
        execution_id=ti.execution_id, idempotent=ti.idempotent, retries=ti.retries,
        retry_delay=ti.retry_delay_seconds, upstream=ti.upstream_task_ids, payload=ti.payload,
        next_eligible_at=ti.next_eligible_at, last_heartbeat_at=ti.last_heartbeat_at, queued_at=ti.queued_at,
        started_at=ti.started_at, ended_at=ti.ended_at, updated_at=ti.updated_at,
    )


def run_public(run: DagRun, tis: list[TaskInstance]) -> RunPublic:
    return RunPublic(dag_id=run.dag_id, run_id=run.run_id, state=run.state, tenant_id=run.tenant_id,
                     trace_id=run.trace_id, conf=run.conf, created_at=run.created_at, ended_at=run.ended_at,
                     task_instances=[ti_public(ti) for ti in tis])


def _read_run(session: SessionDep, dag_id: str, run_id: str) -> RunPublic:
    run = runs.get_run(session=session, dag_id=dag_id, run_id=run_id)
    return run_public(run, runs.run_task_instances(session=session, dag_run_id=run.id))


@router.post("/runs", status_code=201, responses=problems(409))
def create_run(body: RunCreate, session: SessionDep, _: OperatorDep) -> RunPublic:
    """Create a DAG run with its tasks; tasks without upstreams are ready at once."""
    run, tis = runs.create_run(session=session, request=body)
    return run_public(run, tis)


@router.get("/runs")
def list_runs(session: SessionDep, _: OperatorDep, dag_id: str | None = None,
              limit: Annotated[int, Query(ge=1, le=500)] = 50, offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0) -> RunsPublic:
    found, total = runs.list_runs(session=session, limit=limit, offset=offset, dag_id=dag_id)
    items = [run_public(r, runs.run_task_instances(session=session, dag_run_id=r.id)) for r in found]
    return RunsPublic(items=items, total_entries=total, limit=limit, offset=offset)


@router.get("/runs/{dag_id}/{run_id}", responses=problems(404))
def read_run(dag_id: str, run_id: str, session: SessionDep, _: OperatorDep) -> RunPublic:
    return _read_run(session, dag_id, run_id)


@router.post("/runs/{dag_id}/{run_id}/clear-failed", responses=problems(404))
def clear_failed(dag_id: str, run_id: str, session: SessionDep, _: OperatorDep) -> RunPublic:
    """Clear every failed, infra_failed and upstream_failed task instance of the run."""
    run = runs.get_run(session=session, dag_id=dag_id, run_id=run_id)
    operator_rails.clear_failed(session=session, dag_run_id=run.id)
    return _read_run(session, dag_id, run_id)


@router.get("/task-instances/{ti_id}", responses=problems(404))
def read_task_instance(ti_id: uuid.UUID, session: SessionDep, _: OperatorDep) -> TaskInstancePublic:
    return ti_public(runs.get_task_instance(session=session, ti_id=ti_id))


def _moved(ti: TaskInstance | None) -> TaskInstance:
    if ti is None:
        raise AppError(409, "task-instance-moved", "Task instance moved",
                       "The task instance changed while the request ran; read it and retry.")
    return ti


@router.post("/task-instances/{ti_id}/clear", responses=problems(404, 409))
def clear_task_instance(ti_id: uuid.UUID, session: SessionDep, _: OperatorDep) -> TaskInstancePublic:
    """Start a new try (any in-flight attempt is fenced off and told to terminate)."""
    ti = runs.get_task_instance(session=session, ti_id=ti_id)
    return ti_public(_moved(operator_rails.clear(session=session, ti=ti)))


@router.post("/task-instances/{ti_id}/mark", responses=problems(404, 409))
def mark_task_instance(ti_id: uuid.UUID, body: MarkRequest, session: SessionDep, _: OperatorDep) -> TaskInstancePublic:
    """Mark success or failed (any in-flight attempt is fenced off and told to terminate)."""
    ti = runs.get_task_instance(session=session, ti_id=ti_id)
    return ti_public(_moved(operator_rails.mark(session=session, ti=ti, state=body.state)))
