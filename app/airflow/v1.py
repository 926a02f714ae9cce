"""/api/v1: Airflow 2.10's read routes, shapes and problem+json errors, HTTP Basic auth."""

from collections.abc import Iterator
from datetime import datetime
from http import HTTPStatus
from typing import Annotated, Any

from fastapi import Depends, Header, Request
from fastapi.responses import Response
from pydantic import BaseModel

from app.airflow import logs as paging
from app.airflow import service
from app.airflow.params import Offset, limit
from app.airflow.service import TryView
from app.auth import tokens
from app.auth.deps import BasicDep, BearerDep, installation, require_operator_or_basic
from app.errors import unauthorized
from app.logs.deps import StoreDep
from app.logs.store import LogStore
from app.orchestration.models import DagRun
from app.orchestration.models import TaskInstance as TaskInstanceRow
from app.web.deps import SessionDep
from app.web.problems import ErrorFamily, problem_response, problems, register_error_family
from app.web.routes import Router

PREFIX = "/api/v1"
ERRORS_DOC = "https://airflow.apache.org/docs/apache-airflow/2.10.0/stable-rest-api-ref.html#section/Errors/"
_ERROR_NAMES = {400: ("BadRequest", "Bad Request"), 401: ("Unauthenticated", "Unauthorized"),
                403: ("PermissionDenied", "Forbidden"), 404: ("NotFound", "Not Found"),
                405: ("MethodNotAllowed", "Method Not Allowed"), 406: ("NotAcceptable", "Not Acceptable"),
                409: ("AlreadyExists", "Conflict")}


def _render(*, status: int, type: str, title: str, detail: str, headers: dict[str, str] | None = None,
            **extra: Any) -> Any:
    if status == 422:
        status = 400  # connexion refuses a bad parameter, or a value it cannot take, with a 400
    name, airflow_title = _ERROR_NAMES.get(status, ("Unknown", HTTPStatus(status).phrase))
    return problem_response(status, ERRORS_DOC + name, airflow_title, detail, headers=headers)


# Connexion refuses bad parameters with 400, never 422; HTTP Basic may be throttled (429).
register_error_family(PREFIX, ErrorFamily(render=_render, documented=lambda s: problems(s)[s],
                                          answers=(400, 413, 429, 503), never=(422,)))


def require_basic_operator(request: Request, bearer: BearerDep, basic: BasicDep) -> str:
    """HTTP Basic (as the 2.10 client sends it on every call); a bearer token works too."""
    if bearer is None and basic is None:
        raise unauthorized("Basic credentials are required.", scheme='Basic realm="fenceline"')
    return require_operator_or_basic(request, bearer, basic)


# Operation IDs: each /api/v2 twin takes the plain name (Airflow 3's own), these add "_v1".
router = Router(prefix=PREFIX, tags=["airflow-v1"], dependencies=[Depends(require_basic_operator)],
                generate_unique_id_function=lambda route: f"{route.name}_v1",
                responses={401: {"description": "Unauthenticated"}, 403: {"description": "Not an operator's token"},
                           404: {"description": "Not found"}})
Limit = limit(100)
RUN = "/dags/{dag_id}/dagRuns/{dag_run_id}"
TI = RUN + "/taskInstances"


# --- wire schemas: Airflow 2.10's field names (docs/airflow-compat.md §3.4) ------------------

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


# --- mapping ---------------------------------------------------------------------------------

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
        epochs=[{"attempt_epoch": e.attempt_epoch, "execution_id": str(e.execution_id) if e.execution_id else None,
                 "state": e.state, "outcome_kind": e.outcome_kind, "reason": e.reason,
                 "user_code_started": e.user_code_started} for e in view.epochs],
    )


def ti_models(session: SessionDep, tis: list[TaskInstanceRow]) -> list[TaskInstance]:
    return [try_model(view) for view in service.current_tries(session, tis)]


# --- routes ---------------------------------------------------------------------------------

@router.get("/dags")
def get_dags(session: SessionDep, limit: Limit = 100, offset: Offset = 0) -> DAGCollection:
    dags, total = service.list_dags(session, limit, offset)
    return DAGCollection(total_entries=total, dags=[
        DAG(dag_id=dag_id, dag_display_name=dag_id, last_parsed_time=first) for dag_id, first in dags])


@router.get("/pools")
def get_pools(session: SessionDep, limit: Limit = 100, offset: Offset = 0) -> PoolCollection:
    """The pools, by name, with their slot use."""
    uses, total = service.pools(session, limit, offset)
    return PoolCollection(pools=[Pool(**service.pool_fields(u)) for u in uses], total_entries=total)


@router.get("/dags/{dag_id}/dagRuns")
def get_dag_runs(dag_id: str, session: SessionDep, limit: Limit = 100, offset: Offset = 0) -> DAGRunCollection:
    """The DAG's runs; `~` lists every DAG's."""
    runs, total = service.list_runs(session, dag_id, limit, offset)
    return DAGRunCollection(dag_runs=[run_model(r) for r in runs], total_entries=total)


@router.get(RUN)
def get_dag_run(dag_id: str, dag_run_id: str, session: SessionDep) -> DAGRun:
    return run_model(service.get_run(session, dag_id, dag_run_id))


@router.get(TI)
def get_task_instances(dag_id: str, dag_run_id: str, session: SessionDep, limit: Limit = 100,
                       offset: Offset = 0) -> TaskInstanceCollection:
    """The run's task instances; `~` for the run and/or the DAG lists across them (Airflow 2.10
    filters by run id when only the DAG is `~`)."""
    tis, total = service.list_task_instances(session, dag_id, dag_run_id, limit, offset)
    return TaskInstanceCollection(task_instances=ti_models(session, tis), total_entries=total)


@router.get(TI + "/{task_id}")
def get_task_instance(dag_id: str, dag_run_id: str, task_id: str, session: SessionDep) -> TaskInstance:
    ti = service.get_task_instance(session, dag_id, dag_run_id, task_id, -1, mapped_route=False)
    return ti_models(session, [ti])[0]


@router.get(TI + "/{task_id}/tries")
def get_task_instance_tries(dag_id: str, dag_run_id: str, task_id: str, session: SessionDep,
                            map_index: int = -1) -> TaskInstanceCollection:
    return _tries(session, dag_id, dag_run_id, task_id, map_index)


@router.get(TI + "/{task_id}/tries/{task_try_number}")
def get_task_instance_try_details(dag_id: str, dag_run_id: str, task_id: str, task_try_number: int,
                                  session: SessionDep, map_index: int = -1) -> TaskInstance:
    ti = service.get_task_instance(session, dag_id, dag_run_id, task_id, map_index, mapped_route=True)
    return try_model(service.get_try(session, ti, task_try_number))


@router.get(TI + "/{task_id}/logs/{task_try_number}", response_model=InstanceLog,
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, 400: {}})
def get_log(dag_id: str, dag_run_id: str, task_id: str, task_try_number: int, session: SessionDep,
            store: StoreDep, request: Request, full_content: bool = False, map_index: int = -1,
            token: str | None = None, accept: Annotated[str | None, Header()] = None) -> Response:
    """A try's log: JSON pages (`content` text, `continuation_token` always a string), or the
    whole log as text/plain (Airflow 2 prefers text/plain for `*/*`)."""
    ti = service.get_task_instance(session, dag_id, dag_run_id, task_id, map_index, mapped_route=True)
    log = service.try_log(session, store, ti, task_try_number)
    media = paging.preferred(accept, ["text/plain", "application/json"], default="application/json")
    if media == "text/plain":
        return paging.answer(session, store, lambda reader: paging.batched(
            paging.text_chunks(reader, log, 0, log.size)), log.size, "text/plain; charset=utf-8")
    start = paging.start_position(installation(request).keyring, token, ti.id, task_try_number, log)
    win = paging.window(store.within(session), log, start, full=full_content)
    # Airflow 2 always answers a token; at the end of a finished log it reads as "nothing more".
    next_token = tokens.sign_cursor(installation(request).keyring, ti.id, task_try_number, win.end)

    def body(reader: LogStore) -> Iterator[bytes]:
        return paging.batched(part for parts in (
            ['{"content":"'], paging.json_string_stream(reader, log, win.start, win.end),
            ['","continuation_token":"' + next_token + '"}']) for part in parts)
    return paging.answer(session, store, body, win.end - win.start, "application/json")


@router.get(TI + "/{task_id}/{map_index}")
def get_mapped_task_instance(dag_id: str, dag_run_id: str, task_id: str, map_index: int,
                             session: SessionDep) -> TaskInstance:
    ti = service.get_task_instance(session, dag_id, dag_run_id, task_id, map_index, mapped_route=True)
    return ti_models(session, [ti])[0]


@router.get(TI + "/{task_id}/{map_index}/tries")
def get_mapped_task_instance_tries(dag_id: str, dag_run_id: str, task_id: str, map_index: int,
                                   session: SessionDep) -> TaskInstanceCollection:
    return _tries(session, dag_id, dag_run_id, task_id, map_index)


@router.get(TI + "/{task_id}/{map_index}/tries/{task_try_number}")
def get_mapped_task_instance_try_details(dag_id: str, dag_run_id: str, task_id: str, map_index: int,
                                         task_try_number: int, session: SessionDep) -> TaskInstance:
    ti = service.get_task_instance(session, dag_id, dag_run_id, task_id, map_index, mapped_route=True)
    return try_model(service.get_try(session, ti, task_try_number))


def _tries(session: SessionDep, dag_id: str, run_id: str, task_id: str, map_index: int) -> TaskInstanceCollection:
    ti = service.get_task_instance(session, dag_id, run_id, task_id, map_index, mapped_route=True)
    views = service.tries(session, ti)
    return TaskInstanceCollection(task_instances=[try_model(v) for v in views], total_entries=len(views))
