"""/api/v2: Airflow 3's read routes, shapes and errors ({"detail": …}), bearer auth."""

import json
from collections.abc import Iterator
from datetime import datetime
from http import HTTPStatus
from typing import Annotated, Any

from fastapi import Depends, Header, Path, Request
from fastapi.responses import JSONResponse, Response

from app import __version__
from app.airflow import logs as paging
from app.airflow import service
from app.airflow.params import Offset, limit
from app.airflow.service import WILDCARD, TryView
from app.airflow.v2_schemas import (
    BaseInfoResponse,
    DAGCollectionResponse,
    DAGDetailsResponse,
    DAGResponse,
    DAGRunCollectionResponse,
    DAGRunResponse,
    EpochResponse,
    HealthInfoResponse,
    JobCollectionResponse,
    LoginBody,
    LoginResponse,
    PoolCollectionResponse,
    PoolResponse,
    SchedulerInfoResponse,
    TaskInstanceCollectionResponse,
    TaskInstanceHistoryCollectionResponse,
    TaskInstanceHistoryResponse,
    TaskInstanceResponse,
    TaskInstancesLogResponse,
    TriggererInfoResponse,
    VersionInfo,
)
from app.auth import tokens
from app.auth.deps import BearerDep, check_password, installation, operator_token
from app.db.engine import database_answers
from app.db.types import utcnow
from app.errors import AppError, forbidden, unauthorized
from app.logs.deps import StoreDep
from app.orchestration.models import DagRun, TaskInstance
from app.web.deps import SessionDep, commit
from app.web.problems import ErrorFamily, register_error_family
from app.web.routes import Router

PREFIX = "/api/v2"


async def require_bearer_operator(request: Request, bearer: BearerDep) -> str:
    """An operator's bearer token, refused as Airflow 3 refuses one: 401 when missing or
    expired, 403 when invalid or of another kind. CPU only: no thread hop (app/auth/deps.py)."""
    if bearer is None:
        raise unauthorized("Not authenticated")
    try:
        return tokens.decode(installation(request).keyring, bearer.credentials, scopes=("operator",))["sub"]
    except tokens.ExpiredToken:
        raise unauthorized("Token Expired") from None
    except (tokens.InvalidToken, tokens.WrongScope):
        raise forbidden("Invalid JWT token") from None


router = Router(prefix=PREFIX, tags=["airflow-v2"], dependencies=[Depends(require_bearer_operator)],
                responses={401: {"description": "Not authenticated"}, 403: {"description": "Invalid JWT token"},
                           404: {"description": "Not found"}})
# Airflow 3 serves these without a token (contract 6), and its CLI logs in outside /api/v2.
open_router = Router(prefix=PREFIX, tags=["airflow-v2"])
cli_login_router = Router(tags=["airflow-v2"])
RUN = "/dags/{dag_id}/dagRuns/{dag_run_id}"
TI = RUN + "/taskInstances"
Limit = limit(50)


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
    "properties": {"detail": {"title": "Detail",
                              "anyOf": [{"type": "string"}, {"type": "object", "additionalProperties": True}]}},
}
AIRFLOW_3 = ErrorFamily(render=_render, documented=_documented, answers=(413, 422, 503),
                        schemas={"HTTPExceptionResponse": HTTP_EXCEPTION_RESPONSE})
register_error_family(PREFIX, AIRFLOW_3)
register_error_family("/auth/token/cli", AIRFLOW_3)  # Airflow's CLI login answers in Airflow 3's shape




# --- mapping ---------------------------------------------------------------------------------

def dag_response(dag_id: str, first_run: datetime) -> DAGResponse:
    return DAGResponse(dag_id=dag_id, dag_display_name=dag_id, last_parsed_time=first_run)


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
    return DAGCollectionResponse(total_entries=total, dags=[dag_response(d, first) for d, first in dags])


@router.get("/dags/{dag_id}")
def get_dag(dag_id: str, session: SessionDep) -> DAGResponse:
    """A DAG fenceline knows by its runs (it keeps no DAG files)."""
    return dag_response(dag_id, service.get_dag(session, dag_id))


@router.get("/dags/{dag_id}/details")
def get_dag_details(dag_id: str, session: SessionDep) -> DAGDetailsResponse:
    first = service.get_dag(session, dag_id)
    return DAGDetailsResponse(**dag_response(dag_id, first).model_dump(), start_date=first, last_parsed=first)


@router.get("/dags/{dag_id}/dagRuns")
def get_dag_runs(dag_id: str, session: SessionDep, limit: Limit = 50,
                 offset: Offset = 0) -> DAGRunCollectionResponse:
    """The DAG's runs; `~` lists every DAG's."""
    runs, total = service.list_runs(session, dag_id, limit, offset)
    return DAGRunCollectionResponse(dag_runs=[run_response(r) for r in runs], total_entries=total)


@router.get(RUN)
def get_dag_run(dag_id: str, dag_run_id: str, session: SessionDep) -> DAGRunResponse:
    return run_response(service.get_run(session, dag_id, dag_run_id))


@router.get(TI)
def get_task_instances(dag_id: str, dag_run_id: str, session: SessionDep,
                       limit: Limit = 50, offset: Offset = 0) -> TaskInstanceCollectionResponse:
    """The run's task instances; `~` for the run (and the DAG) lists across runs."""
    if dag_id == WILDCARD and dag_run_id != WILDCARD:
        raise AppError(400, "bad-request", "Bad request", "dag_id is required when dag_run_id is specified")
    tis, total = service.list_task_instances(session, dag_id, dag_run_id, limit, offset)
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
            responses={200: {"content": {"application/x-ndjson": {"schema": {"type": "string"}}}}, 400: {}, 406: {}})
def get_log(dag_id: str, dag_run_id: str, task_id: str, try_number: Annotated[int, Path(ge=0)],
            session: SessionDep, store: StoreDep, request: Request, full_content: bool = False,
            map_index: int = -1, token: str | None = None,
            accept: Annotated[str | None, Header()] = None) -> Response:
    """A try's log: every epoch in order, each behind one system line. JSON pages (or the whole
    log with full_content), or the whole log as streamed NDJSON."""
    first = (accept or "").split(",")[0].strip()
    if first and not first.startswith(("*/*", "application/json", "application/x-ndjson")):
        return JSONResponse({"detail": "Only application/json or application/x-ndjson is supported"}, status_code=406)
    ndjson = first.startswith("application/x-ndjson")
    ti = service.get_task_instance(session, dag_id, dag_run_id, task_id, map_index, mapped_route=True)
    log = service.try_log(session, store, ti, try_number)
    start = paging.start_position(installation(request).keyring, token, ti.id, try_number, log)
    win = paging.window(store.within(session), log, start, full=full_content or ndjson)
    next_token = win.token(installation(request).keyring, ti.id, try_number)
    size = win.end - win.start
    if ndjson:
        headers = {"Airflow-Continuation-Token": next_token} if next_token else None
        return paging.answer(session, store, lambda reader: paging.batched(
            part + b"\n" for part in paging.structured_parts(reader, log, win.start, win.end, b"\n")),
            size, "application/x-ndjson", headers)
    return paging.answer(session, store, lambda reader: paging.batched(_json_log(
        paging.structured_parts(reader, log, win.start, win.end, b","), next_token)), size, "application/json")


def _json_log(parts: Iterator[bytes], next_token: str | None) -> Iterator[bytes]:
    yield b'{"content":['
    for n, part in enumerate(parts):
        yield (b"," if n else b"") + part
    yield b'],"continuation_token":' + json.dumps(next_token).encode() + b"}"


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
    commit(session)
    return TaskInstanceHistoryCollectionResponse(
        task_instances=[TaskInstanceHistoryResponse(**try_response(v)) for v in views], total_entries=len(views))


def _try(session: SessionDep, dag_id: str, run_id: str, task_id: str, map_index: int,
         number: int) -> TaskInstanceHistoryResponse:
    ti = service.get_task_instance(session, dag_id, run_id, task_id, map_index, mapped_route=True)
    return TaskInstanceHistoryResponse(**try_response(service.get_try(session, ti, number)))


# --- what Airflow tooling asks of a server beyond tries and logs -------------------------------

@router.get("/pools")
def get_pools(session: SessionDep, limit: Limit = 50, offset: Offset = 0) -> PoolCollectionResponse:
    """The pools (POST /v1/pools makes them), by name, each with the slots its task instances
    hold: queued and running (occupied), scheduled, and open."""
    uses, total = service.pools(session, limit, offset)
    return PoolCollectionResponse(pools=[PoolResponse(**service.pool_fields(u)) for u in uses], total_entries=total)


@router.get("/jobs")
def get_jobs(limit: Limit = 50, offset: Offset = 0) -> JobCollectionResponse:
    """Airflow's scheduler and triggerer jobs: fenceline runs none (its readiness and sweeps run
    inside the API server), so the list is empty."""
    return JobCollectionResponse(jobs=[], total_entries=0)


NOT_TAKEN = "fenceline does not take this write: runs are created with POST /v1/runs, and a DAG " \
            "exists while it has runs (it cannot be paused, changed or deleted)."


@router.post("/dags/{dag_id}/dagRuns", include_in_schema=False)
@router.patch("/dags/{dag_id}", include_in_schema=False)
@router.delete("/dags/{dag_id}", include_in_schema=False)
def writes_not_taken(dag_id: str) -> None:
    """`dags trigger`, `pause`, `unpause`, `update`, `delete`: 405 with the reason (not 501:
    airflowctl 0.1.5 shows the detail of a 4xx, but crashes on a 5xx; docs/airflow-compat.md)."""
    err = AppError(405, "method-not-allowed", "Method not allowed", NOT_TAKEN)
    err.headers = {"Allow": "GET"}
    raise err


@open_router.get("/version")
def get_version() -> VersionInfo:
    """fenceline's version (open, as Airflow 3 serves it)."""
    return VersionInfo(version=__version__, git_version=None)


@open_router.get("/monitor/health")
def get_health(request: Request) -> HealthInfoResponse:
    """Airflow 3's health shape (open): the metadatabase is fenceline's database; the
    scheduler's work (readiness, sweeps) runs inside this server, so it is healthy when the
    database answers; there is no triggerer."""
    if database_answers(request.app.state.read_engine):
        status, beat = "healthy", utcnow().isoformat()
    else:
        status, beat = "unhealthy", None
    return HealthInfoResponse(
        metadatabase=BaseInfoResponse(status=status),
        scheduler=SchedulerInfoResponse(status=status, latest_scheduler_heartbeat=beat),
        triggerer=TriggererInfoResponse(status=None, latest_triggerer_heartbeat=None))


@cli_login_router.post("/auth/token/cli", status_code=201, responses={
    400: {"description": "Username and password must be provided"}, 401: {"description": "Invalid credentials"},
    429: {"description": "Too many failed logins"}})
def cli_login(body: LoginBody, request: Request) -> LoginResponse:
    """Airflow's CLI login (airflowctl `auth login`): the operator's username and password for a
    bearer token. Any Authorization header sent along (a re-login's stale token) is ignored."""
    if not body.username or not body.password:
        raise AppError(400, "bad-request", "Bad request", "Username and password must be provided")
    check_password(request, body.username, body.password, refusal="Invalid credentials")  # throttled as every login
    return LoginResponse(access_token=operator_token(request, body.username))
