"""Airflow 3's wire schemas for /api/v2, with Airflow's field names (docs/airflow-compat.md §2.4).
Fields fenceline has no equivalent for carry Airflow's neutral defaults; fenceline's own
additive fields are marked."""

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from app.airflow.listing import Task as DagTask
from app.airflow.service import TryView
from app.orchestration.models import DagRun
from app.web.schemas import Strict


class TimeDelta(BaseModel):
    type: str = Field("TimeDelta", alias="__type")
    days: int
    seconds: int
    microseconds: int

    @classmethod
    def of(cls, seconds: float) -> "TimeDelta":
        whole, micros = divmod(round(seconds * 1_000_000), 1_000_000)
        days, rest = divmod(whole, 86_400)
        return cls(days=days, seconds=rest, microseconds=micros)


class TaskResponse(BaseModel):
    """A task as its DAG's latest run declares it (Airflow 3's TaskApi)."""

    task_id: str
    task_display_name: str
    owner: str | None = None
    start_date: datetime | None = None
    end_date: datetime | None = None
    trigger_rule: str = "all_success"  # a task runs once every upstream task succeeded
    depends_on_past: bool = False
    wait_for_downstream: bool = False
    retries: int
    queue: str | None
    pool: str
    pool_slots: int
    execution_timeout: TimeDelta | None
    retry_delay: TimeDelta
    retry_exponential_backoff: float = 0
    priority_weight: int
    weight_rule: str = "absolute"  # a task's weight is its own; fenceline sums nothing downstream
    ui_color: str | None = None
    ui_fgcolor: str | None = None
    template_fields: list[str] = []
    downstream_task_ids: list[str]
    doc_md: str | None = None
    operator_name: str | None = None
    params: dict[str, Any] | None = None
    class_ref: dict[str, Any] | None = None
    is_mapped: bool
    extra_links: list[str] = []


class TaskCollectionResponse(BaseModel):
    tasks: list[TaskResponse]
    total_entries: int


def task_fields(task: DagTask) -> dict[str, Any]:
    """A task's fields as both versions' task schemas name them."""
    ti, timeout = task.ti, task.ti.payload.get("timeout_seconds")
    return {"task_id": ti.task_id, "task_display_name": ti.task_id, "downstream_task_ids": task.downstream,
            "is_mapped": task.is_mapped, "pool": ti.pool, "pool_slots": ti.pool_slots, "queue": ti.queue,
            "priority_weight": ti.priority_weight, "retries": ti.retries,
            "retry_delay": TimeDelta.of(ti.retry_delay_seconds),
            "execution_timeout": TimeDelta.of(timeout) if timeout else None}


def task_response(task: DagTask) -> TaskResponse:
    return TaskResponse(**task_fields(task))


class DagTagResponse(BaseModel):
    name: str
    dag_id: str
    dag_display_name: str


class DAGResponse(BaseModel):
    dag_id: str
    dag_display_name: str
    is_paused: bool = False
    is_stale: bool = False
    fileloc: str = ""
    file_token: str = ""
    owners: list[str] = []
    tags: list[DagTagResponse] = []
    max_active_tasks: int = 16
    max_active_runs: int | None = None
    max_consecutive_failed_dag_runs: int = 0
    has_task_concurrency_limits: bool = False
    has_import_errors: bool = False
    timetable_partitioned: bool = False
    is_backfillable: bool = False
    timetable_periodic: bool = False
    description: str | None = None
    last_parsed_time: datetime | None = None


class DAGCollectionResponse(BaseModel):
    dags: list[DAGResponse]
    total_entries: int


class DAGRunResponse(BaseModel):
    dag_run_id: str
    dag_id: str
    dag_display_name: str
    logical_date: datetime | None
    queued_at: datetime | None
    start_date: datetime | None
    end_date: datetime | None
    duration: float | None
    data_interval_start: datetime | None = None
    data_interval_end: datetime | None = None
    run_after: datetime
    last_scheduling_decision: datetime | None = None
    run_type: str = "manual"
    state: str
    triggered_by: str | None = "rest_api"
    triggering_user_name: str | None = None
    conf: dict[str, Any]
    note: str | None = None
    dag_versions: list[dict[str, Any]] = []
    bundle_version: str | None = None


class DAGRunCollectionResponse(BaseModel):
    dag_runs: list[DAGRunResponse]
    total_entries: int


class EpochResponse(BaseModel):
    """fenceline's additive detail of one execution attempt (Airflow clients ignore it)."""

    attempt_epoch: int
    execution_id: str | None
    state: str
    outcome_kind: str | None
    reason: str | None
    user_code_started: bool
    start_date: datetime | None
    end_date: datetime | None


class TaskInstanceHistoryResponse(BaseModel):
    task_id: str
    dag_id: str
    dag_run_id: str
    map_index: int
    start_date: datetime | None
    end_date: datetime | None
    duration: float | None
    state: str | None
    try_number: int
    max_tries: int
    task_display_name: str
    dag_display_name: str
    hostname: str | None = None
    unixname: str | None = None
    pool: str = "default_pool"
    pool_slots: int = 1
    queue: str | None = None
    priority_weight: int | None = None
    operator: str | None = None
    operator_name: str | None = None
    queued_when: datetime | None = None
    scheduled_when: datetime | None = None
    pid: int | None = None
    executor: str | None = None
    executor_config: str = "{}"
    dag_version: dict[str, Any] | None = None
    # Additive fenceline fields.
    attempt_epoch: int
    infra_attempts: int
    last_failure_kind: str | None
    last_failure_reason: str | None
    epochs: list[EpochResponse]


class TaskInstanceHistoryCollectionResponse(BaseModel):
    task_instances: list[TaskInstanceHistoryResponse]
    total_entries: int


class TaskInstanceResponse(TaskInstanceHistoryResponse):
    id: str
    logical_date: datetime | None
    run_after: datetime
    note: str | None = None
    rendered_map_index: str | None = None
    rendered_fields: dict[str, Any] = {}
    trigger: dict[str, Any] | None = None
    triggerer_job: dict[str, Any] | None = None
    execution_id: str | None = None


class TaskInstanceCollectionResponse(BaseModel):
    task_instances: list[TaskInstanceResponse]
    total_entries: int


class StructuredLogMessage(BaseModel):
    event: str
    timestamp: datetime | None = None


class TaskInstancesLogResponse(BaseModel):
    content: list[StructuredLogMessage]
    continuation_token: str | None


class DAGDetailsResponse(DAGResponse):
    catchup: bool = False
    render_template_as_native_obj: bool = False
    concurrency: int = 16
    dag_run_timeout: str | None = None
    asset_expression: dict[str, Any] | None = None
    doc_md: str | None = None
    start_date: datetime | None = None
    end_date: datetime | None = None
    is_paused_upon_creation: bool | None = None
    params: dict[str, Any] | None = None
    template_search_path: list[str] | None = None
    timezone: str | None = "UTC"
    last_parsed: datetime | None = None
    default_args: dict[str, Any] | None = None
    owner_links: dict[str, str] | None = None
    is_favorite: bool = False
    active_runs_count: int = 0


class PoolResponse(BaseModel):
    name: str
    slots: int
    description: str | None
    include_deferred: bool
    occupied_slots: int
    running_slots: int
    queued_slots: int
    scheduled_slots: int
    open_slots: int
    deferred_slots: int


class PoolCollectionResponse(BaseModel):
    pools: list[PoolResponse]
    total_entries: int


class JobResponse(BaseModel):
    id: int


class JobCollectionResponse(BaseModel):
    jobs: list[JobResponse]
    total_entries: int


class VersionInfo(BaseModel):
    version: str
    git_version: str | None


class BaseInfoResponse(BaseModel):
    status: str | None


class SchedulerInfoResponse(BaseInfoResponse):
    latest_scheduler_heartbeat: str | None


class TriggererInfoResponse(BaseInfoResponse):
    latest_triggerer_heartbeat: str | None


class HealthInfoResponse(BaseModel):
    metadatabase: BaseInfoResponse
    scheduler: SchedulerInfoResponse
    triggerer: TriggererInfoResponse


class LoginBody(Strict):
    username: str
    password: str


class LoginResponse(BaseModel):
    access_token: str


# --- presentation: fenceline's rows as Airflow 3 shows them ---------------------------------

def dag_response(dag_id: str, first_run: datetime) -> DAGResponse:
    return DAGResponse(dag_id=dag_id, dag_display_name=dag_id, last_parsed_time=first_run)


def dag_details(dag_id: str, first_run: datetime) -> DAGDetailsResponse:
    return DAGDetailsResponse(**dag_response(dag_id, first_run).model_dump(), start_date=first_run,
                              last_parsed=first_run)


def run_response(run: DagRun) -> DAGRunResponse:
    duration = (run.ended_at - run.created_at).total_seconds() if run.ended_at else None
    return DAGRunResponse(
        dag_run_id=run.run_id, dag_id=run.dag_id, dag_display_name=run.dag_id, logical_date=run.created_at,
        queued_at=run.created_at, start_date=run.created_at, end_date=run.ended_at, duration=duration,
        run_after=run.created_at, state=run.state, conf=run.conf,
    )


def try_response(view: TryView) -> dict[str, Any]:
    ti = view.ti
    return dict(
        task_id=ti.task_id, dag_id=ti.dag_id, dag_run_id=ti.run_id, map_index=ti.map_index,
        start_date=view.start_date, end_date=view.end_date, duration=view.duration, state=view.state,
        try_number=view.try_number, max_tries=ti.max_tries, task_display_name=ti.task_id,
        dag_display_name=ti.dag_id, queued_when=view.queued_at, attempt_epoch=view.attempt_epoch,
        pool=ti.pool, pool_slots=ti.pool_slots, queue=ti.queue, priority_weight=ti.priority_weight,
        infra_attempts=view.infra_attempts, last_failure_kind=view.last_failure_kind,
        last_failure_reason=view.last_failure_reason, hostname=view.hostname, executor=view.executor,
        epochs=[EpochResponse(attempt_epoch=e.attempt_epoch,
                              execution_id=str(e.execution_id) if e.execution_id else None,
                              state=e.state, outcome_kind=e.outcome_kind, reason=e.reason,
                              user_code_started=e.user_code_started, start_date=e.started_at, end_date=e.ended_at)
                for e in view.epochs],
    )
