"""The Airflow lists: DAGs, runs, task instances, pools, a DAG's tasks and a task instance's
tries, each filtered and ordered over what the answer shows (app/airflow/list_params.py names the
parameters, app/airflow/filters.py turns them into SQL)."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import Select, and_, case, func, literal, null, select
from sqlmodel import Session

from app.airflow.filters import AnyOf, Ordering, Shown, bad_request, conditions, given_filters
from app.airflow.service import EXECUTOR, WILDCARD, TryView, get_run, not_found
from app.db.statements import page_by_key, paginate, paginate_by_key
from app.execution.models import TaskAttempt
from app.orchestration import states
from app.orchestration.counts import count_task_instances, unmapped_per_dag
from app.orchestration.models import DagRun, TaskInstance
from app.routing.models import Pool
from app.routing.service import PoolUse, pool_uses

ColumnTerm = Any  # an ORDER BY term, as an Ordering answers them

# --- DAGs: one per dag_id with a run ---------------------------------------------------------

FIRST_RUN = func.min(DagRun.created_at)
DAG_SHOWN: Shown = {
    "dag_id": DagRun.dag_id, "dag_display_name": DagRun.dag_id,
    **dict.fromkeys(("tags", "owners", "is_stale", "is_active", "is_paused", "has_import_errors", "is_favorite",
                     "has_asset_schedule", "asset_dependency", "bundle_name", "bundle_version", "timetable_type")),
}
_DAG_ORDER = {"dag_id": DagRun.dag_id, "dag_display_name": DagRun.dag_id}
DAG_ORDER = Ordering(
    {**_DAG_ORDER, "start_date": FIRST_RUN, "next_dagrun": None}, [DagRun.dag_id],
    refused=dict.fromkeys(("state", "last_run_state", "last_run_start_date"), "fenceline orders DAGs by dag_id, "
                          "dag_display_name, start_date (the first run) or next_dagrun (none)"))
DAG_ORDER_V1 = Ordering({**_DAG_ORDER, "last_parsed_time": FIRST_RUN}, [DagRun.dag_id])


def list_dags(session: Session, filters: BaseModel, order: list[ColumnTerm], limit: int,
              offset: int) -> tuple[list[tuple[str, datetime]], int]:
    """Every dag_id that has a run, with its first run's time (fenceline keeps no DAG files)."""
    query = (select(DagRun.dag_id, FIRST_RUN).where(*conditions(filters, DAG_SHOWN))
             .group_by(DagRun.dag_id).order_by(*order))
    rows, total = paginate(session, query, limit, offset)
    return [(r[0], r[1]) for r in rows], total


# --- runs ------------------------------------------------------------------------------------

RUN_SHOWN: Shown = {
    "dag_id": DagRun.dag_id, "run_id": DagRun.run_id, "state": DagRun.state, "run_type": literal("manual"),
    # A run is queued, started and due at its creation (fenceline schedules nothing by time).
    **dict.fromkeys(("run_after", "logical_date", "start_date"), DagRun.created_at),
    "end_date": DagRun.ended_at, "updated_at": DagRun.updated_at,
    **dict.fromkeys(("dag_version", "bundle_version", "triggering_user_name", "partition_key", "consuming_asset",
                     "partition_date")),
}
_RUN_ORDER = {"id": DagRun.created_at, "state": DagRun.state, "dag_id": DagRun.dag_id, "dag_run_id": DagRun.run_id,
              "start_date": DagRun.created_at, "end_date": DagRun.ended_at, "updated_at": DagRun.updated_at}
_RUN_TIES = [DagRun.created_at, DagRun.dag_id, DagRun.run_id]
RUN_ORDER = Ordering({**_RUN_ORDER, "run_id": DagRun.run_id, "logical_date": DagRun.created_at,
                      "run_after": DagRun.created_at, "partition_date": None}, _RUN_TIES, refused={
    "conf": "fenceline does not order runs by their configuration",
    "duration": "fenceline does not order by duration (the duration is worked out per answer)"})
RUN_ORDER_V1 = Ordering({**_RUN_ORDER, "execution_date": DagRun.created_at, "external_trigger": None}, _RUN_TIES,
                        refused={"conf": "fenceline does not order runs by their configuration"})


def list_runs(session: Session, dag_id: str, filters: BaseModel, order: list[ColumnTerm], limit: int,
              offset: int) -> tuple[list[DagRun], int]:
    """The runs of `dag_id`, or of every DAG for `~`."""
    query = select(DagRun).where(*conditions(filters, RUN_SHOWN)).order_by(*order)
    if dag_id != WILDCARD:
        query = query.where(DagRun.dag_id == dag_id)
    return paginate(session, query, limit, offset)


# --- task instances --------------------------------------------------------------------------

ATTEMPTS = TaskAttempt.__table__
_OF_CURRENT_TRY = and_(ATTEMPTS.c.task_instance_id == TaskInstance.id, ATTEMPTS.c.try_number == TaskInstance.try_number)
# A task instance's start and end as its answer shows them (app/airflow/service.py's _view):
# when its current try's first epoch started, and when the try ended.
SHOWN_START = func.coalesce(
    select(func.min(func.coalesce(ATTEMPTS.c.started_at, ATTEMPTS.c.claimed_at))).where(_OF_CURRENT_TRY)
    .scalar_subquery(), TaskInstance.started_at)
SHOWN_END = func.coalesce(TaskInstance.ended_at, case(
    (TaskInstance.state.in_(states.FINISHED), select(func.max(ATTEMPTS.c.ended_at)).where(_OF_CURRENT_TRY)
     .scalar_subquery())))
SHOWN_STATE = case((TaskInstance.state == states.NONE, null()),
                   (TaskInstance.state == states.INFRA_FAILED, states.FAILED.value), else_=TaskInstance.state)
TI_SHOWN: Shown = {
    "dag_id": TaskInstance.dag_id, "run_id": TaskInstance.run_id, "task_id": TaskInstance.task_id,
    "task_display_name": TaskInstance.task_id, "state": TaskInstance.state,  # filters name native states
    "pool": TaskInstance.pool, "queue": TaskInstance.queue, "try_number": TaskInstance.try_number,
    "map_index": TaskInstance.map_index, "run_after": TaskInstance.created_at, "logical_date": TaskInstance.created_at,
    "start_date": SHOWN_START, "end_date": SHOWN_END, "updated_at": TaskInstance.updated_at,
    "executor": literal(EXECUTOR),
    **dict.fromkeys(("version_number", "operator", "operator_name", "rendered_map_index")),
}
TI_TIES = [TaskInstance.dag_id, TaskInstance.run_id, TaskInstance.task_id, TaskInstance.map_index]
TI_ORDER = Ordering({
    "id": TaskInstance.id, "state": SHOWN_STATE, "start_date": SHOWN_START, "end_date": SHOWN_END,
    "map_index": TaskInstance.map_index, "try_number": TaskInstance.try_number, "logical_date": TaskInstance.created_at,
    "run_after": TaskInstance.created_at,
    **dict.fromkeys(("data_interval_start", "data_interval_end", "rendered_map_index", "operator"))},
    TI_TIES, refused={"duration": "fenceline does not order by duration (the duration is worked out per answer)"})
TI_DEFAULT_ORDER = TI_ORDER(["map_index"])  # Airflow 3's; unmapped task instances first, then by dag_id
_DEFAULT_ORDER_SQL = [str(term) for term in TI_DEFAULT_ORDER]


def list_task_instances(session: Session, dag_id: str, run_id: str, filters: BaseModel, order: Sequence[ColumnTerm],
                        limit: int, offset: int) -> tuple[list[TaskInstance], int]:
    """The task instances of one run; `~` for the run (and the DAG) widens to every run. A
    concrete run must exist (404)."""
    query = select(TaskInstance).where(*conditions(filters, TI_SHOWN)).order_by(*order)
    if run_id != WILDCARD:
        if dag_id == WILDCARD:
            # Airflow 2.10 filters by run id across DAGs; Airflow 3 refuses it (v2 checks first).
            query = query.where(TaskInstance.run_id == run_id)
        else:
            query = query.where(TaskInstance.dag_run_id == get_run(session, dag_id, run_id).id)
    elif dag_id != WILDCARD:
        query = query.where(TaskInstance.dag_id == dag_id)
    counted = _counted(filters, dag_id, run_id)
    if counted is None:
        return paginate_by_key(session, query, TaskInstance.id, limit, offset)
    states_, of_dag = counted
    total = count_task_instances(session=session, states=states_, dag_id=of_dag)
    if of_dag is None and offset and _in_default_order(order):
        query, offset = _skipped_by_counts(session, query, states_, limit, offset)
    return page_by_key(session, query, TaskInstance.id, limit, offset), total


def _counted(filters: BaseModel, dag_id: str, run_id: str) -> tuple[list[str] | None, str | None] | None:
    """(native states or None for any, dag_id or None for any) when the kept counts
    (app/orchestration/counts.py) count the list: every run, filtered by state and the DAG
    alone. None for any other filter."""
    given = list(given_filters(filters).values())
    if run_id != WILDCARD or len(given) > 1:
        return None
    of_dag = None if dag_id == WILDCARD else dag_id
    if not given:
        return None, of_dag
    ((marker, shown),) = given
    if not (isinstance(marker, AnyOf) and marker.field == "state"):
        return None
    return marker.condition_values(shown), of_dag


def _in_default_order(order: Sequence[ColumnTerm]) -> bool:
    return [str(term) for term in order] == _DEFAULT_ORDER_SQL


def _skipped_by_counts(session: Session, query: Select, states_: list[str] | None, limit: int,
                       offset: int) -> tuple[Select, int]:
    """The page at `offset` of `query` (in the default order, every unmapped task instance
    before every mapped one, then by dag_id) as the same page of the unmapped rows of the DAGs
    it spans, and the offset from the first of them: the rows of the DAGs before it are skipped
    by their kept counts, never walked. Unchanged when the page reaches the mapped rows."""
    before, first, skip = 0, None, 0
    for dag, n in unmapped_per_dag(session=session, states=states_):
        if first is None and before + n > offset:
            first, skip = dag, offset - before
        before += n
        if first is not None and before >= offset + limit:
            return query.where(TaskInstance.map_index == -1, TaskInstance.dag_id.between(first, dag)), skip
    return query, offset


def list_mapped(session: Session, dag_id: str, run_id: str, task_id: str, filters: BaseModel,
                order: Sequence[ColumnTerm], limit: int, offset: int) -> tuple[list[TaskInstance], int]:
    """The mapped task instances (map_index >= 0) of one task of one run; 404 for an unknown
    run or task, and for a task that is not mapped, as Airflow answers."""
    run = get_run(session, dag_id, run_id)
    of_task = (TaskInstance.dag_run_id == run.id, TaskInstance.task_id == task_id)
    query = select(TaskInstance).where(*of_task, TaskInstance.map_index >= 0, *conditions(filters, TI_SHOWN))
    found, total = paginate(session, query.order_by(*order), limit, offset)
    if not total:
        kinds = set(session.execute(select(TaskInstance.map_index >= 0).where(*of_task)).scalars())
        if not kinds:
            raise not_found(f"Task id {task_id} not found")
        if True not in kinds:
            raise not_found(f"Task id {task_id} is not mapped")
    return found, total


# --- pools, jobs -----------------------------------------------------------------------------

POOL_SHOWN: Shown = {"name": Pool.name}
POOL_ORDER = Ordering(dict.fromkeys(("id", "pool", "name"), Pool.name), [Pool.name])
POOL_ORDER_V1 = Ordering({"id": Pool.name, "name": Pool.name, "slots": Pool.slots}, [Pool.name])
# What Airflow 3 orders its jobs by: all of it orders fenceline's empty list alike.
JOB_ORDER = Ordering(dict.fromkeys(("id", "dag_id", "state", "job_type", "start_date", "end_date", "latest_heartbeat",
                                    "executor_class", "hostname", "unixname")), [])


def list_pools(session: Session, filters: BaseModel, order: list[ColumnTerm], limit: int,
               offset: int) -> tuple[list[PoolUse], int]:
    """One page of the pools with their slot use (`id` orders by name: a pool's name is its key)."""
    names, total = paginate(session, select(Pool.name).where(*conditions(filters, POOL_SHOWN)).order_by(*order),
                            limit, offset)
    uses = {u.pool.name: u for u in pool_uses(session=session, names=names)}
    return [uses[name] for name in names if name in uses], total


# --- a DAG's tasks, a task instance's tries --------------------------------------------------

@dataclass(frozen=True)
class Task:
    """A task as its DAG's latest run declares it (a DAG is known by its runs)."""

    ti: TaskInstance
    is_mapped: bool
    downstream: list[str]


def dag_tasks(session: Session, dag_id: str) -> list[Task]:
    """The tasks of the DAG's latest run, by task_id; 404 for a DAG without runs."""
    latest = session.execute(select(DagRun.id).where(DagRun.dag_id == dag_id)
                             .order_by(DagRun.created_at.desc(), DagRun.run_id.desc()).limit(1)).scalar()
    if latest is None:
        raise not_found(f"DAG with dag_id: '{dag_id}' not found")
    tis = list(session.execute(select(TaskInstance).where(TaskInstance.dag_run_id == latest)
                               .order_by(TaskInstance.task_id, TaskInstance.map_index)).scalars())
    first: dict[str, TaskInstance] = {}
    mapped: set[str] = set()
    for ti in tis:
        first.setdefault(ti.task_id, ti)
        if ti.map_index >= 0:
            mapped.add(ti.task_id)
    return [Task(ti, task_id in mapped, sorted({t.task_id for t in tis if task_id in t.upstream_task_ids}))
            for task_id, ti in first.items()]


def dag_task(session: Session, dag_id: str, task_id: str) -> Task:
    """One task of the DAG's latest run; 404 in Airflow's words."""
    for task in dag_tasks(session, dag_id):
        if task.ti.task_id == task_id:
            return task
    raise not_found(f"Task with id: '{task_id}' not found")


# What a task list orders by (Airflow's `order_by`), on the answer's models of either version.
TASK_KEYS = {name: (lambda task, name=name: getattr(task, name))
             for name in ("task_id", "task_display_name", "pool", "pool_slots", "queue", "priority_weight", "retries",
                          "is_mapped", "trigger_rule", "weight_rule")}


def ordered(items: list[Any], order_by: str, keys: dict[str, Any]) -> list[Any]:
    """`items` in Airflow 2's `order_by` over values worked out in Python (`keys`: name -> the
    value of an item); nulls last ascending, first descending, as the SQL lists."""
    name = order_by.lstrip("-")
    if name not in keys:
        raise bad_request(f"order_by={order_by}: not a field this list orders by "
                          f"(it orders by {', '.join(sorted(keys))}; `-` for descending)")
    value = keys[name]
    return sorted(items, key=lambda item: (value(item) is None, value(item)), reverse=order_by.startswith("-"))


TRY_KEYS = {"try_number": lambda v: v.try_number, "start_date": lambda v: v.start_date,
            "end_date": lambda v: v.end_date, "duration": lambda v: v.duration, "state": lambda v: v.state}


def ordered_tries(views: list[TryView], order_by: str) -> list[TryView]:
    return ordered(views, order_by, TRY_KEYS)

