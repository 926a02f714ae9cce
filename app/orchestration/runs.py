"""DAG runs and task instances: creation and reads (readiness is a rail: readiness.refresh_run)."""

import uuid
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from app.db.statements import paginate
from app.db.types import utcnow
from app.errors import AppError, not_found
from app.orchestration import states
from app.orchestration.events import announce_queues
from app.orchestration.models import DagRun, TaskInstance
from app.orchestration.routes import RouteCheck
from app.orchestration.schemas import RunCreate


def create_run(*, session: Session, request: RunCreate, check_routes: RouteCheck) -> tuple[DagRun, list[TaskInstance]]:
    """A run and its task instances; tasks without upstreams are scheduled at once. 422
    unknown-pool or pool-too-small (`check_routes`, routing's) if a task names a pool that does
    not exist or asks more slots than it has.
    409 run-exists if (dag_id, run_id) is taken: the unique key decides, so of two concurrent
    creations of one run the second gets run-exists too."""
    now = utcnow()
    wanted: dict[str, int] = {}
    for t in request.tasks:
        wanted[t.pool] = max(wanted.get(t.pool, 0), t.pool_slots)
    check_routes(session=session, wanted=wanted)
    run_id = request.run_id or f"manual__{now.isoformat()}"
    run = DagRun(dag_id=request.dag_id, run_id=run_id, tenant_id=request.tenant_id,
                 trace_id=request.trace_id or uuid.uuid4().hex, conf=request.conf, created_at=now, updated_at=now)
    try:
        with session.begin_nested():
            session.add(run)
    except IntegrityError:
        raise AppError(409, "run-exists", "Run exists", f"Run {run_id!r} of DAG {request.dag_id!r} exists.") from None
    waited_on = {upstream for t in request.tasks for upstream in t.upstream}
    tis = [
        TaskInstance(
            dag_run_id=run.id, dag_id=run.dag_id, run_id=run.run_id, task_id=t.task_id, map_index=t.map_index,
            payload=t.payload.model_dump(exclude_none=True), upstream_task_ids=t.upstream,
            has_downstream=t.task_id in waited_on,
            retries=t.retries, max_tries=t.retries, retry_delay_seconds=t.retry_delay,
            max_infra_attempts=t.max_infra_attempts, idempotent=t.idempotent, queue=t.queue, pool=t.pool,
            pool_slots=t.pool_slots, priority_weight=t.priority_weight, tenant_id=run.tenant_id,
            state=states.NONE if t.upstream else states.SCHEDULED, created_at=now, updated_at=now,
        )
        for t in request.tasks
    ]
    session.add_all(tis)
    session.flush()
    announce_queues(session, (ti.queue for ti in tis if ti.state == states.SCHEDULED))
    return run, tis


def get_run(*, session: Session, dag_id: str, run_id: str) -> DagRun:
    run = session.execute(
        select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id).execution_options(populate_existing=True)
    ).scalar_one_or_none()
    if run is None:
        raise not_found("run", f"No run {run_id!r} of DAG {dag_id!r}.")
    return run


def list_runs(*, session: Session, limit: int, offset: int, dag_id: str | None = None, state: str | None = None,
              run_id_contains: str | None = None, created_from: datetime | None = None,
              created_to: datetime | None = None, count_up_to: int | None = None) -> tuple[list[DagRun], int]:
    """Runs, newest first, and how many there are: of one DAG, in one state, whose run id holds
    a text (case-insensitive, taken literally), created within a time range (from inclusive,
    to exclusive); `count_up_to` bounds the count (app/db/statements.paginate). Newest first
    is the (created_at, dag_id, run_id) index read backwards, and (dag_id, created_at, run_id)
    for one DAG, so a page never sorts the history."""
    query = select(DagRun).order_by(DagRun.created_at.desc(), DagRun.dag_id.desc(), DagRun.run_id.desc())
    if dag_id is not None:
        query = query.where(DagRun.dag_id == dag_id)
    if state is not None:
        query = query.where(DagRun.state == state)
    if run_id_contains:
        query = query.where(func.lower(DagRun.run_id).contains(run_id_contains.lower(), autoescape=True))
    if created_from is not None:
        query = query.where(DagRun.created_at >= created_from)
    if created_to is not None:
        query = query.where(DagRun.created_at < created_to)
    return paginate(session, query, limit, offset, count_up_to)


def get_run_with_task_instances(*, session: Session, dag_id: str, run_id: str) -> tuple[DagRun, list[TaskInstance]]:
    """The run and its task instances (by task_id, map_index); 404 run-not-found."""
    run = get_run(session=session, dag_id=dag_id, run_id=run_id)
    return run, run_task_instances(session=session, dag_run_id=run.id)


def run_task_instances(*, session: Session, dag_run_id: uuid.UUID) -> list[TaskInstance]:
    return list(session.execute(
        select(TaskInstance).where(TaskInstance.dag_run_id == dag_run_id)
        .order_by(TaskInstance.task_id, TaskInstance.map_index)
        .execution_options(populate_existing=True)
    ).scalars())


def runs_task_instances(*, session: Session, dag_run_ids: list[uuid.UUID]) -> dict[uuid.UUID, list[TaskInstance]]:
    """The task instances of each of the runs (by task_id, map_index), in one statement: a page
    of runs costs the same few statements however many runs it shows."""
    found: dict[uuid.UUID, list[TaskInstance]] = {run_id: [] for run_id in dag_run_ids}
    if dag_run_ids:
        for ti in session.execute(
                select(TaskInstance).where(TaskInstance.dag_run_id.in_(dag_run_ids))
                .order_by(TaskInstance.dag_run_id, TaskInstance.task_id, TaskInstance.map_index)
                .execution_options(populate_existing=True)).scalars():
            found[ti.dag_run_id].append(ti)
    return found


def states_by_run(*, session: Session, dag_run_ids: list[uuid.UUID]) -> dict[uuid.UUID, dict[str, int]]:
    """How many task instances of each run are in each state, in one statement (counted by the
    (dag_run_id, state) index)."""
    found: dict[uuid.UUID, dict[str, int]] = {run_id: {} for run_id in dag_run_ids}
    if dag_run_ids:
        for run_id, state, n in session.execute(
                select(TaskInstance.dag_run_id, TaskInstance.state, func.count())
                .where(TaskInstance.dag_run_id.in_(dag_run_ids)).group_by(TaskInstance.dag_run_id, TaskInstance.state)):
            found[run_id][state] = n
    return found


def get_task_instance(*, session: Session, ti_id: uuid.UUID) -> TaskInstance:
    """The task instance, or 404 task-instance-not-found."""
    ti = session.get(TaskInstance, ti_id)
    if ti is None:
        raise not_found("task-instance", f"No task instance {ti_id}.")
    return ti
