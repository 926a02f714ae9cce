"""What both Airflow versions read: runs, task instances, a try per entry, and log pages."""

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, Row, bindparam, func, select
from sqlmodel import Session

from app.db.engine import database_answers
from app.db.types import utcnow
from app.errors import AppError
from app.execution import history
from app.execution.models import TaskAttempt
from app.identity.models import Execution
from app.logs import service as logs
from app.logs.service import TryLog
from app.logs.stores.base import LogStore
from app.orchestration import states
from app.orchestration.models import DagRun, TaskInstance
from app.routing.service import PoolUse, pool_uses

# Native states Airflow's enum lacks, and what each Airflow version shows instead.
_STATE_MAP = {states.NONE: None, states.INFRA_FAILED: states.FAILED}


def airflow_state(native: str) -> str | None:
    return _STATE_MAP.get(native, native)


def native_states(shown: str | None) -> list[str]:
    """The native states an Airflow state stands for (`none`, `no_status` or null: not yet
    scheduled); none for a state fenceline never has (`deferred`)."""
    if shown in (None, "none", "no_status"):
        return [states.NONE]
    return [native for native in states.ALL if airflow_state(native) == shown]


def not_found(detail: str) -> AppError:
    return AppError(404, "not-found", "Not found", detail)


def get_run(session: Session, dag_id: str, run_id: str) -> DagRun:
    run = session.execute(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)).scalar_one_or_none()
    if run is None:
        raise not_found(f"The DagRun with dag_id: `{dag_id}` and run_id: `{run_id}` was not found")
    return run


# Airflow's "every DAG" / "every run" path value on list routes.
WILDCARD = "~"


def get_dag(session: Session, dag_id: str) -> datetime:
    """A DAG is known by its runs: the time of its first one; 404 in Airflow 3's words."""
    first = session.execute(select(func.min(DagRun.created_at)).where(DagRun.dag_id == dag_id)).scalar_one()
    if first is None:
        raise not_found(f"Dag with id: {dag_id} was not found")
    return first


def scheduler_health(engine: Engine) -> tuple[str, str | None]:
    """The scheduler's health as Airflow shows it, and its heartbeat: fenceline's scheduling
    (readiness, sweeps) runs inside the API server, so it is healthy, now, when the database
    answers."""
    if database_answers(engine):
        return "healthy", utcnow().isoformat()
    return "unhealthy", None


def get_pool(session: Session, name: str) -> PoolUse:
    """The pool and its slot use; 404 naming it."""
    found = pool_uses(session=session, names=[name])
    if not found:
        raise not_found(f"The Pool with name: `{name}` was not found")
    return found[0]


def pool_fields(use: PoolUse) -> dict[str, Any]:
    """A pool in the shape both Airflow APIs share (fenceline defers nothing)."""
    return dict(name=use.pool.name, slots=use.pool.slots, description=use.pool.description, include_deferred=False,
                occupied_slots=use.occupied, running_slots=use.running, queued_slots=use.queued,
                scheduled_slots=use.scheduled, open_slots=use.open, deferred_slots=0)


TI = TaskInstance.__table__
# The read routes' statements, built once with bound values (building one cost more than
# running it); Core rows, which answer the same attribute names as the ORM's objects.
_AT_KEYS = (TI.c.dag_id == bindparam("dag_id"), TI.c.run_id == bindparam("run_id"),
            TI.c.task_id == bindparam("task_id"))
TI_AT = select(TI).where(*_AT_KEYS, TI.c.map_index == bindparam("map_index"))
ANY_MAPPED = select(TI.c.id).where(*_AT_KEYS).limit(1)


def get_task_instance(session: Session, dag_id: str, run_id: str, task_id: str, map_index: int,
                      *, mapped_route: bool) -> Row:
    """The TI at these keys (a Core row); on a route without map_index, a mapped task is 404 as
    in Airflow."""
    keys = {"dag_id": dag_id, "run_id": run_id, "task_id": task_id}
    ti = session.execute(TI_AT, {**keys, "map_index": map_index}).first()
    if ti is None:
        if not mapped_route and map_index == -1 and session.execute(ANY_MAPPED, keys).first():
            raise not_found("Task instance is mapped, add the map_index value to the URL")
        raise not_found(f"The Task Instance with dag_id: `{dag_id}`, run_id: `{run_id}`, task_id: `{task_id}` "
                        f"and map_index: `{map_index}` was not found")
    return ti


EXECUTOR = "fenceline"


@dataclass
class TryView:
    """One try as Airflow lists it: the latest epoch's state, and every epoch it had."""

    ti: TaskInstance
    try_number: int
    state: str | None  # already mapped onto Airflow's enum
    attempt_epoch: int
    infra_attempts: int
    last_failure_kind: str | None
    last_failure_reason: str | None
    queued_at: datetime | None
    start_date: datetime | None
    end_date: datetime | None
    epochs: list[TaskAttempt] = field(default_factory=list)
    hostname: str | None = None  # the seat of the execution its latest epoch ran on

    # Airflow's executor name: every task instance is placed by fenceline's claims.
    executor = EXECUTOR

    @property
    def duration(self) -> float | None:
        if self.start_date is None or self.end_date is None:
            return None
        return (self.end_date - self.start_date).total_seconds()


def tries(session: Session, ti: TaskInstance) -> list[TryView]:
    """One entry per try, oldest first, the current try last. A try spent by an application
    failure shows `failed` even while the next try waits (Airflow 3's rule); a try being
    re-placed shows `scheduled`, `queued` or `running`."""
    return _with_hosts(session, [_view(ti, t, states.FAILED if t.state == states.UP_FOR_RETRY else t.state)
                                 for t in history.tries(session, ti)])


def current_tries(session: Session, tis: list[TaskInstance]) -> list[TryView]:
    """The current try of each task instance as the task instance routes show it (its own
    state, up_for_retry included)."""
    return _with_hosts(session, [_view(t.record, t, t.state) for t in history.current_tries(session, tis)])


def _execution_of(view: TryView) -> Any:
    """The execution the try's latest epoch was placed on (the task instance's own while it is in flight)."""
    placed = [e.execution_id for e in view.epochs if e.execution_id]
    return placed[-1] if placed else None


def _with_hosts(session: Session, views: list[TryView]) -> list[TryView]:
    """Each try's `hostname`: the seat of the execution its latest epoch ran on, read by one
    query for them all."""
    placed = [_execution_of(view) for view in views]
    ids = {e for e in placed if e is not None}
    seats = dict(session.execute(select(Execution.execution_id, Execution.seat)
                                 .where(Execution.execution_id.in_(ids))).tuples().all()) if ids else {}
    for view, execution_id in zip(views, placed, strict=True):
        view.hostname = seats.get(execution_id)
    return views


def _view(ti: TaskInstance, t: history.Try, state: str) -> TryView:
    row, epochs = t.record, t.epochs
    starts = [e.started_at or e.claimed_at for e in epochs]
    ends = [e.ended_at for e in epochs if e.ended_at]
    return TryView(
        ti=ti, try_number=t.number, state=airflow_state(state),
        attempt_epoch=row.attempt_epoch if row else (epochs[-1].attempt_epoch if epochs else 0),
        infra_attempts=row.infra_attempts if row else 0,
        last_failure_kind=row.last_failure_kind if row else None,
        last_failure_reason=row.last_failure_reason if row else None,
        queued_at=row.queued_at if row else None,
        start_date=min(starts) if starts else (row.started_at if row else None),
        end_date=(row.ended_at if row and row.ended_at else (max(ends) if ends and state in states.FINISHED else None)),
        epochs=epochs,
    )


def get_try(session: Session, ti: TaskInstance, try_number: int) -> TryView:
    for view in tries(session, ti):
        if view.try_number == try_number:
            return view
    raise not_found(f"The Task Instance with dag_id: `{ti.dag_id}`, run_id: `{ti.run_id}`, task_id: "
                    f"`{ti.task_id}`, map_index: `{ti.map_index}` and try_number: `{try_number}` was not found")


def get_try_log(session: Session, store: LogStore, ti: TaskInstance, try_number: int) -> TryLog:
    """The try's log; 404 "TaskInstance not found" (Airflow's words) for a try that never was."""
    try:
        return logs.try_log(session=session, store=store, ti=ti, try_number=try_number)
    except AppError as exc:
        if exc.status == 404:
            raise not_found("TaskInstance not found") from None
        raise


def structured(line: str) -> dict[str, object]:
    """A log line as Airflow 3's StructuredLogMessage: a JSON object line with a string `event`
    keeps its fields (a timestamp that is not ISO 8601 is moved aside so clients can parse the
    message); any other line is the event itself."""
    if line.startswith("{"):
        try:
            parsed = json.loads(line)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("event"), str):
            ts = parsed.get("timestamp")
            if ts is not None and not _iso(ts):
                parsed["timestamp_raw"] = parsed.pop("timestamp")
            return parsed
    if line.startswith(logs.SYSTEM_PREFIX):  # set apart: fenceline's own line about a re-place
        return {"event": line, "level": "info", "logger": "fenceline"}
    return {"event": line}


def _iso(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True
