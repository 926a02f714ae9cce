"""Airflow 2.10's wire schemas for /api/v1, with Airflow's field names (docs/airflow-compat.md
§3.4), and fenceline's rows as Airflow 2.10 shows them."""

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from app.airflow.listing import Task as DagTask
from app.airflow.service import TryView
from app.airflow.v2_schemas import (
    BaseInfoResponse,
    SchedulerInfoResponse,
    TimeDelta,
    TriggererInfoResponse,
    task_fields,
)
from app.orchestration.models import DagRun


class DAG(BaseModel):
    dag_id: str
    dag_display_name: str
    root_dag_id: str | None = None
    is_paused: bool = False
    is_active: bool = True
    is_subdag: bool = False
    last_parsed_time: datetime | None = None
    fileloc: str = ""
    file_token: str = ""
    owners: list[str] = []
    description: str | None = None
    schedule_interval: dict[str, Any] | None = None
    tags: list[dict[str, str]] = []
    max_active_tasks: int = 16
    max_active_runs: int = 16
    has_task_concurrency_limits: bool = False
    has_import_errors: bool = False


class Pool(BaseModel):
    name: str
    slots: int
    occupied_slots: int
    running_slots: int
    queued_slots: int
    scheduled_slots: int
    open_slots: int
    deferred_slots: int
    description: str | None
    include_deferred: bool


class PoolCollection(BaseModel):
    pools: list[Pool]
    total_entries: int


class DAGCollection(BaseModel):
    dags: list[DAG]
    total_entries: int


class DAGRun(BaseModel):
    dag_run_id: str
    dag_id: str
    logical_date: datetime
    execution_date: datetime
    start_date: datetime | None
    end_date: datetime | None
    data_interval_start: datetime | None = None
    data_interval_end: datetime | None = None
    last_scheduling_decision: datetime | None = None
    run_type: str = "manual"
    state: str
    external_trigger: bool = True
    conf: dict[str, Any]
    note: str | None = None


class DAGRunCollection(BaseModel):
    dag_runs: list[DAGRun]
    total_entries: int


class TaskInstance(BaseModel):
    """A task instance, and also one try (Airflow 2 reuses the shape for tries)."""

    task_id: str
    task_display_name: str
    dag_id: str
    dag_run_id: str
    execution_date: str
    start_date: str | None
    end_date: str | None
    duration: float | None
    state: str | None
    try_number: int
    map_index: int
    max_tries: int
    hostname: str = ""
    unixname: str = ""
    pool: str = "default_pool"
    pool_slots: int = 1
    queue: str | None = None
    priority_weight: int | None = None
    operator: str | None = None
    queued_when: str | None = None
    pid: int | None = None
    executor: str | None = None
    executor_config: str = "{}"
    sla_miss: dict[str, Any] | None = None
    rendered_map_index: str | None = None
    rendered_fields: dict[str, Any] = {}
    trigger: dict[str, Any] | None = None
    triggerer_job: dict[str, Any] | None = None
    note: str | None = None
    # Additive fenceline fields.
    attempt_epoch: int
    infra_attempts: int
    last_failure_kind: str | None
    epochs: list[dict[str, Any]]


class TaskInstanceCollection(BaseModel):
    task_instances: list[TaskInstance]
    total_entries: int


class InstanceLog(BaseModel):
    content: str
    continuation_token: str


class DAGDetail(DAG):
    """A DAG's details: Airflow's neutral defaults where fenceline has no DAG file to read."""

    catchup: bool = False
    concurrency: int = 16
    dag_run_timeout: dict[str, Any] | None = None
    doc_md: str | None = None
    start_date: datetime | None = None
    end_date: datetime | None = None
    is_paused_upon_creation: bool | None = None
    last_parsed: datetime | None = None
    orientation: str = "LR"
    params: dict[str, Any] = {}
    render_template_as_native_obj: bool = False
    template_search_path: list[str] | None = None
    timezone: str = "UTC"


class Task(BaseModel):
    """A task as its DAG's latest run declares it. Fields fenceline has no value for and the
    2.10 client takes only as non-null (owner, class_ref, ui_color, ...) are left out."""

    task_id: str
    task_display_name: str
    downstream_task_ids: list[str]
    is_mapped: bool
    pool: str
    pool_slots: int
    queue: str | None
    priority_weight: int
    weight_rule: str = "absolute"  # a task's weight is its own; fenceline sums nothing downstream
    retries: int
    retry_delay: TimeDelta
    retry_exponential_backoff: bool = False
    execution_timeout: TimeDelta | None
    trigger_rule: str = "all_success"  # a task runs once every upstream task succeeded
    depends_on_past: bool = False
    wait_for_downstream: bool = False
    start_date: datetime | None = None
    end_date: datetime | None = None
    executor: str | None = None
    doc_md: str | None = None
    extra_links: list[dict[str, Any]] = []
    template_fields: list[str] = []


class TaskCollection(BaseModel):
    tasks: list[Task]
    total_entries: int


class DagProcessorInfo(BaseModel):
    status: str | None
    latest_dag_processor_heartbeat: str | None


class HealthInfo(BaseModel):
    metadatabase: BaseInfoResponse
    scheduler: SchedulerInfoResponse
    triggerer: TriggererInfoResponse
    dag_processor: DagProcessorInfo


# --- presentation: fenceline's rows as Airflow 2.10 shows them -----------------------------

def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def run_model(run: DagRun) -> DAGRun:
    return DAGRun(dag_run_id=run.run_id, dag_id=run.dag_id, logical_date=run.created_at,
                  execution_date=run.created_at, start_date=run.created_at, end_date=run.ended_at,
                  state=run.state, conf=run.conf)


def try_model(view: TryView) -> TaskInstance:
    ti = view.ti
    return TaskInstance(
        task_id=ti.task_id, task_display_name=ti.task_id, dag_id=ti.dag_id, dag_run_id=ti.run_id,
        execution_date=ti.created_at.isoformat(), start_date=_iso(view.start_date), end_date=_iso(view.end_date),
        duration=view.duration, state=view.state, try_number=view.try_number,
        map_index=ti.map_index, max_tries=ti.max_tries, queued_when=_iso(view.queued_at),
        pool=ti.pool, pool_slots=ti.pool_slots, queue=ti.queue, priority_weight=ti.priority_weight,
        attempt_epoch=view.attempt_epoch, infra_attempts=view.infra_attempts, last_failure_kind=view.last_failure_kind,
        hostname=view.hostname or "", executor=view.executor,
        epochs=[{"attempt_epoch": e.attempt_epoch, "execution_id": str(e.execution_id) if e.execution_id else None,
                 "state": e.state, "outcome_kind": e.outcome_kind, "reason": e.reason,
                 "user_code_started": e.user_code_started} for e in view.epochs],
    )


def dag_model(dag_id: str, first_run: datetime) -> DAG:
    return DAG(dag_id=dag_id, dag_display_name=dag_id, last_parsed_time=first_run)


def dag_detail(dag_id: str, first_run: datetime) -> DAGDetail:
    return DAGDetail(**dag_model(dag_id, first_run).model_dump(), start_date=first_run, last_parsed=first_run)


def task_model(task: DagTask) -> Task:
    return Task(**task_fields(task))
