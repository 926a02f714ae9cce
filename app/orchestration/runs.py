"""DAG runs: creation, reads, readiness and the run's own state."""

import uuid
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from app.db import utcnow
from app.errors import AppError, not_found
from app.orchestration import states as s
from app.orchestration.models import DagRun, TaskInstance
from app.orchestration.schemas import RunCreate


def create_run(*, session: Session, request: RunCreate) -> tuple[DagRun, list[TaskInstance]]:
    """A run and its task instances; tasks without upstreams are scheduled at once.
    409 run-exists if (dag_id, run_id) is taken: the unique key decides, so of two concurrent
    creations of one run the second gets run-exists too."""
    now = utcnow()
    run_id = request.run_id or f"manual__{now.isoformat()}"
    run = DagRun(dag_id=request.dag_id, run_id=run_id, tenant_id=request.tenant_id,
                 trace_id=request.trace_id or uuid.uuid4().hex, conf=request.conf, created_at=now, updated_at=now)
    try:
        with session.begin_nested():
            session.add(run)
    except IntegrityError:
        raise AppError(409, "run-exists", "Run exists", f"Run {run_id!r} of DAG {request.dag_id!r} exists.") from None
    tis = [
        TaskInstance(
            dag_run_id=run.id, dag_id=run.dag_id, run_id=run.run_id, task_id=t.task_id, map_index=t.map_index,
            payload=t.payload.model_dump(exclude_none=True), upstream_task_ids=t.upstream,
            retries=t.retries, max_tries=t.retries, retry_delay_seconds=t.retry_delay,
            max_infra_attempts=t.max_infra_attempts, idempotent=t.idempotent,
            state=s.NONE if t.upstream else s.SCHEDULED, created_at=now, updated_at=now,
        )
        for t in request.tasks
    ]
    session.add_all(tis)
    session.flush()
    return run, tis


def get_run(*, session: Session, dag_id: str, run_id: str) -> DagRun:
    run = session.execute(
        select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id).execution_options(populate_existing=True)
    ).scalar_one_or_none()
    if run is None:
        raise not_found("run", f"No run {run_id!r} of DAG {dag_id!r}.")
    return run


def list_runs(*, session: Session, limit: int, offset: int, dag_id: str | None = None) -> tuple[list[DagRun], int]:
    query = select(DagRun)
    if dag_id is not None:
        query = query.where(DagRun.dag_id == dag_id)
    total = session.execute(select(func.count()).select_from(query.subquery())).scalar_one()
    rows = session.execute(query.order_by(DagRun.created_at.desc(), DagRun.id).limit(limit).offset(offset)).scalars()
    return list(rows), total


def run_task_instances(*, session: Session, dag_run_id: uuid.UUID) -> list[TaskInstance]:
    return list(session.execute(
        select(TaskInstance).where(TaskInstance.dag_run_id == dag_run_id)
        .order_by(TaskInstance.task_id, TaskInstance.map_index)
        .execution_options(populate_existing=True)
    ).scalars())


def get_task_instance(*, session: Session, ti_id: uuid.UUID) -> TaskInstance:
    ti = session.get(TaskInstance, ti_id)
    if ti is None:
        raise not_found("task-instance", f"No task instance {ti_id}.")
    return ti


def lock_run(session: Session, dag_run_id: uuid.UUID) -> None:
    """Lock the run's row. Every path that settles, clears or marks a task instance takes it
    before the task instance's row: one lock order, so those paths queue on the run and never
    deadlock, also against a reaper sweep that holds a run across several marks."""
    session.execute(select(DagRun.id).where(DagRun.id == dag_run_id).with_for_update()).scalar_one()


def refresh_run(session: Session, dag_run_id: uuid.UUID, now: datetime, *, reopen: bool = False) -> None:
    """Readiness and the run's state, after a task instance finished (or was cleared).

    Under the run's lock, two upstreams finishing at once are judged one after the other and
    the second always sees the first: a downstream task is never left waiting.
    Waiting tasks whose upstreams all succeeded become scheduled; those with a failed upstream
    become upstream_failed; with `reopen`, upstream_failed tasks wait again.
    """
    lock_run(session, dag_run_id)
    if reopen:
        session.execute(update(TaskInstance)
                        .where(TaskInstance.dag_run_id == dag_run_id, TaskInstance.state == s.UPSTREAM_FAILED)
                        .values(state=s.NONE, updated_at=now).execution_options(synchronize_session=False))
    # Only what readiness needs, not whole rows: this runs on every finished task instance.
    rows = session.execute(
        select(TaskInstance.id, TaskInstance.task_id, TaskInstance.state, TaskInstance.upstream_task_ids)
        .where(TaskInstance.dag_run_id == dag_run_id)).all()
    stored = {row.id: row.state for row in rows}
    state = dict(stored)
    by_task: dict[str, list[uuid.UUID]] = {}
    for row in rows:
        by_task.setdefault(row.task_id, []).append(row.id)
    changed = True
    while changed:  # upstream_failed propagates down the graph
        changed = False
        for row in rows:
            if state[row.id] != s.NONE:
                continue
            upstream = [state[u] for task in row.upstream_task_ids for u in by_task.get(task, [])]
            if any(st in s.FAILED_STATES for st in upstream):
                state[row.id], changed = s.UPSTREAM_FAILED, True
            elif all(st == s.SUCCESS for st in upstream):
                state[row.id], changed = s.SCHEDULED, True
    for target in (s.SCHEDULED, s.UPSTREAM_FAILED):
        moved = [ti_id for ti_id, st in state.items() if st == target and stored[ti_id] != target]
        if moved:
            session.execute(update(TaskInstance).where(TaskInstance.id.in_(moved), TaskInstance.state == s.NONE)
                            .values(state=target, updated_at=now).execution_options(synchronize_session=False))
    finals = set(state.values())
    if finals <= set(s.FINISHED):
        run_state, ended = (s.SUCCESS if finals == {s.SUCCESS} else s.FAILED), now
    else:
        run_state, ended = "running", None
    session.execute(update(DagRun).where(DagRun.id == dag_run_id)
                    .values(state=run_state, ended_at=ended, updated_at=now).execution_options(synchronize_session=False))
