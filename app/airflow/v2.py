"""/api/v2: Airflow 3's read routes, shapes and errors ({"detail": …}), bearer auth."""

import json
from datetime import datetime
from http import HTTPStatus
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

from app.airflow import logs as paging
from app.airflow import service
from app.airflow.params import Limit, Offset
from app.airflow.service import TryView
from app.auth import tokens
from app.auth.deps import BearerDep, installation
from app.deps import SessionDep, StoreDep
from app.errors import forbidden, unauthorized
from app.orchestration.models import DagRun, TaskInstance
from app.problems import ErrorFamily, register_error_family

PREFIX = "/api/v2"


def require_bearer_operator(request: Request, bearer: BearerDep) -> str:
    """An operator's bearer token, refused as Airflow 3 refuses one: 401 when missing or
    expired, 403 when invalid or of another kind."""
    if bearer is None:
        raise unauthorized("Not authenticated")
    try:
        return tokens.decode(installation(request).keyring, bearer.credentials, scopes=("operator",))["sub"]
    except tokens.ExpiredToken:
        raise unauthorized("Token Expired") from None
    except (tokens.InvalidToken, tokens.WrongScope):
        raise forbidden("Invalid JWT token") from None


router = APIRouter(prefix=PREFIX, tags=["airflow-v2"], dependencies=[Depends(require_bearer_operator)],
                   responses={401: {"description": "Not authenticated"}, 403: {"description": "Invalid JWT token"},
                              404: {"description": "Not found"}})
RUN = "/dags/{dag_id}/dagRuns/{dag_run_id}"
TI = RUN + "/taskInstances"


def _render(*, status: int, type: str, title: str, detail: str, headers: dict[str, str] | None = None,
            **extra: Any) -> JSONResponse:
    if status == 422:  # FastAPI's HTTPValidationError, as Airflow 3 answers every 422
        errors = extra.get("errors") or [{"loc": ["request"], "msg": detail, "type": type.replace("-", "_")}]
        return JSONResponse({"detail": errors}, status_code=422, headers=headers)
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def _documented(status: int) -> dict[str, Any]:
    schema = "HTTPValidationError" if status == 422 else "HTTPExceptionResponse"
    return {"description": HTTPStatus(status).phrase,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}}


# Airflow 3's error body: {"detail": …}.
HTTP_EXCEPTION_RESPONSE = {
    "title": "HTTPExceptionResponse", "type": "object", "required": ["detail"],
    "properties": {"detail": {"title": "Detail", "anyOf": [{"type": "string"}, {"type": "object"}]}},
}
register_error_family(PREFIX, ErrorFamily(render=_render, documented=_documented, answers=(413, 422, 503),
                                          schemas={"HTTPExceptionResponse": HTTP_EXCEPTION_RESPONSE}))


# --- wire schemas: Airflow 3's field names (docs/airflow-compat.md §2.4) --------------------

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


# --- mapping ---------------------------------------------------------------------------------

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
        infra_attempts=view.infra_attempts, last_failure_kind=view.last_failure_kind,
        last_failure_reason=view.last_failure_reason,
        epochs=[EpochResponse(attempt_epoch=e.attempt_epoch,
                              execution_id=str(e.execution_id) if e.execution_id else None,
                              state=e.state, outcome_kind=e.outcome_kind, reason=e.reason,
                              user_code_started=e.user_code_started, start_date=e.started_at, end_date=e.ended_at)
                for e in view.epochs],
    )


def ti_responses(session: SessionDep, tis: list[TaskInstance]) -> list[TaskInstanceResponse]:
    """The live task instances: each its own state (up_for_retry included), its current try's epochs."""
    return [TaskInstanceResponse(**try_response(view), id=str(view.ti.id), logical_date=view.ti.created_at,
                                 run_after=view.ti.created_at,
                                 execution_id=str(view.ti.execution_id) if view.ti.execution_id else None)
            for view in service.current_tries(session, tis)]


# --- routes ---------------------------------------------------------------------------------

@router.get("/dags")
def get_dags(session: SessionDep, limit: Limit = 50, offset: Offset = 0) -> DAGCollectionResponse:
    dags, total = service.list_dags(session, limit, offset)
    return DAGCollectionResponse(total_entries=total, dags=[
        DAGResponse(dag_id=dag_id, dag_display_name=dag_id, last_parsed_time=first) for dag_id, first in dags])


@router.get("/dags/{dag_id}/dagRuns")
def get_dag_runs(dag_id: str, session: SessionDep, limit: Limit = 50, offset: Offset = 0) -> DAGRunCollectionResponse:
    runs, total = service.list_runs(session, dag_id, limit, offset)
    return DAGRunCollectionResponse(dag_runs=[run_response(r) for r in runs], total_entries=total)


@router.get(RUN)
def get_dag_run(dag_id: str, dag_run_id: str, session: SessionDep) -> DAGRunResponse:
    return run_response(service.get_run(session, dag_id, dag_run_id))


@router.get(TI)
def get_task_instances(dag_id: str, dag_run_id: str, session: SessionDep, limit: Limit = 50,
                       offset: Offset = 0) -> TaskInstanceCollectionResponse:
    run = service.get_run(session, dag_id, dag_run_id)
    tis, total = service.list_task_instances(session, run, limit, offset)
    return TaskInstanceCollectionResponse(task_instances=ti_responses(session, tis), total_entries=total)


@router.get(TI + "/{task_id}")
def get_task_instance(dag_id: str, dag_run_id: str, task_id: str, session: SessionDep) -> TaskInstanceResponse:
    ti = service.get_task_instance(session, dag_id, dag_run_id, task_id, -1, mapped_route=False)
    return ti_responses(session, [ti])[0]


@router.get(TI + "/{task_id}/tries")
def get_task_instance_tries(dag_id: str, dag_run_id: str, task_id: str, session: SessionDep,
                            map_index: int = -1) -> TaskInstanceHistoryCollectionResponse:
    return _tries(session, dag_id, dag_run_id, task_id, map_index)


@router.get(TI + "/{task_id}/tries/{task_try_number}")
def get_task_instance_try_details(dag_id: str, dag_run_id: str, task_id: str, task_try_number: int,
                                  session: SessionDep, map_index: int = -1) -> TaskInstanceHistoryResponse:
    return _try(session, dag_id, dag_run_id, task_id, map_index, task_try_number)


@router.get(TI + "/{task_id}/logs/{try_number}", response_model=TaskInstancesLogResponse,
            responses={200: {"content": {"application/x-ndjson": {}}}, 400: {}, 406: {}})
def get_log(dag_id: str, dag_run_id: str, task_id: str, try_number: Annotated[int, Path(ge=0)],
            session: SessionDep, store: StoreDep, request: Request, full_content: bool = False,
            map_index: int = -1, token: str | None = None,
            accept: Annotated[str | None, Header()] = None) -> StreamingResponse:
    """A try's log: every epoch in order, each behind one system line. JSON pages (or the whole
    log with full_content), or the whole log as streamed NDJSON."""
    first = (accept or "").split(",")[0].strip()
    if first and not first.startswith(("*/*", "application/json", "application/x-ndjson")):
        return JSONResponse({"detail": "Only application/json or application/x-ndjson is supported"}, status_code=406)
    ndjson = first.startswith("application/x-ndjson")
    ti = service.get_task_instance(session, dag_id, dag_run_id, task_id, map_index, mapped_route=True)
    log = service.try_log(session, store, ti, try_number)
    start = paging.start_position(installation(request).keyring, token, ti.id, try_number, log)
    win = paging.window(store, log, start, full=full_content or ndjson)
    next_token = win.token(installation(request).keyring, ti.id, try_number)
    if ndjson:
        body = (json.dumps(service.structured(line)) + "\n" for line in paging.lines(store, log, win.start, win.end))
        headers = {"Airflow-Continuation-Token": next_token} if next_token else None
        return StreamingResponse(paging.batched(body), media_type="application/x-ndjson", headers=headers)
    return StreamingResponse(paging.batched(_json_log(paging.lines(store, log, win.start, win.end), next_token)),
                             media_type="application/json")


def _json_log(lines: Any, next_token: str | None) -> Any:
    yield '{"content":['
    for n, line in enumerate(lines):
        yield ("," if n else "") + json.dumps(service.structured(line))
    yield '],"continuation_token":' + json.dumps(next_token) + "}"


@router.get(TI + "/{task_id}/{map_index}")
def get_mapped_task_instance(dag_id: str, dag_run_id: str, task_id: str, map_index: int,
                             session: SessionDep) -> TaskInstanceResponse:
    ti = service.get_task_instance(session, dag_id, dag_run_id, task_id, map_index, mapped_route=True)
    return ti_responses(session, [ti])[0]


@router.get(TI + "/{task_id}/{map_index}/tries")
def get_mapped_task_instance_tries(dag_id: str, dag_run_id: str, task_id: str, map_index: int,
                                   session: SessionDep) -> TaskInstanceHistoryCollectionResponse:
    return _tries(session, dag_id, dag_run_id, task_id, map_index)


@router.get(TI + "/{task_id}/{map_index}/tries/{task_try_number}")
def get_mapped_task_instance_try_details(dag_id: str, dag_run_id: str, task_id: str, map_index: int,
                                         task_try_number: int, session: SessionDep) -> TaskInstanceHistoryResponse:
    return _try(session, dag_id, dag_run_id, task_id, map_index, task_try_number)


def _tries(session: SessionDep, dag_id: str, run_id: str, task_id: str,
           map_index: int) -> TaskInstanceHistoryCollectionResponse:
    ti = service.get_task_instance(session, dag_id, run_id, task_id, map_index, mapped_route=True)
    views = service.tries(session, ti)
    return TaskInstanceHistoryCollectionResponse(
        task_instances=[TaskInstanceHistoryResponse(**try_response(v)) for v in views], total_entries=len(views))


def _try(session: SessionDep, dag_id: str, run_id: str, task_id: str, map_index: int,
         number: int) -> TaskInstanceHistoryResponse:
    ti = service.get_task_instance(session, dag_id, run_id, task_id, map_index, mapped_route=True)
    return TaskInstanceHistoryResponse(**try_response(service.get_try(session, ti, number)))
