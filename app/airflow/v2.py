"""/api/v2: Airflow 3's read routes, shapes and errors ({"detail": …}), bearer auth."""

import json
from collections.abc import Iterator
from http import HTTPStatus
from typing import Annotated, Any, Literal

from fastapi import Depends, Header, Path, Request
from fastapi.responses import JSONResponse, Response

from app import __version__
from app.airflow import framing, listing, service
from app.airflow.absent_resources import MAP_INDEX, add_absent_routes
from app.airflow.filters import bad_request
from app.airflow.list_params import (
    DAGRunsBatchBody,
    DagRunsQuery,
    DagsQuery,
    JobsQuery,
    MappedTaskInstancesQuery,
    PoolsQuery,
    TaskInstancesBatchBody,
    TaskInstancesQuery,
    TasksQuery,
)
from app.airflow.params import honouring
from app.airflow.service import WILDCARD
from app.airflow.v2_schemas import (
    BaseInfoResponse,
    DAGCollectionResponse,
    DAGDetailsResponse,
    DAGResponse,
    DAGRunCollectionResponse,
    DAGRunResponse,
    HealthInfoResponse,
    JobCollectionResponse,
    LoginBody,
    LoginResponse,
    PoolCollectionResponse,
    PoolResponse,
    SchedulerInfoResponse,
    TaskCollectionResponse,
    TaskInstanceCollectionResponse,
    TaskInstanceHistoryCollectionResponse,
    TaskInstanceHistoryResponse,
    TaskInstanceResponse,
    TaskInstancesLogResponse,
    TaskResponse,
    TriggererInfoResponse,
    VersionInfo,
    dag_details,
    dag_response,
    run_response,
    task_response,
    try_response,
)
from app.auth import tokens
from app.auth.deps import BearerDep, check_password, checked_before_body, installation, operator_token, remember_device
from app.errors import AppError, forbidden, unauthorized
from app.logs import paging
from app.logs.deps import StoreDep
from app.orchestration.models import TaskInstance
from app.web.deps import SessionDep, commit
from app.web.problems import ErrorFamily, register_error_family
from app.web.routes import Router

PREFIX = "/api/v2"


@checked_before_body(tokens.OPERATOR_SCOPE)
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
# A list that may refuse a parameter (or its value) answers 400, in Airflow 3's shape.
BAD_REQUEST = {400: {"description": "A parameter fenceline refuses, or a value it cannot order by"}}


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


# --- routes ---------------------------------------------------------------------------------

def ti_responses(session: SessionDep, tis: list[TaskInstance]) -> list[TaskInstanceResponse]:
    """The live task instances: each its own state (up_for_retry included), its current try's epochs."""
    return [TaskInstanceResponse(**try_response(view), id=str(view.ti.id), logical_date=view.ti.created_at,
                                 run_after=view.ti.created_at,
                                 execution_id=str(view.ti.execution_id) if view.ti.execution_id else None)
            for view in service.current_tries(session, tis)]


@router.get("/dags", responses=BAD_REQUEST)
def get_dags(session: SessionDep, params: honouring(DagsQuery)) -> DAGCollectionResponse:
    """Every dag_id with a run (fenceline keeps no DAG files)."""
    dags, total = listing.list_dags(session, params, listing.DAG_ORDER(params.order_by), params.limit, params.offset)
    return DAGCollectionResponse(total_entries=total, dags=[dag_response(d, first) for d, first in dags])


@router.get("/dags/{dag_id}")
def get_dag(dag_id: str, session: SessionDep) -> DAGResponse:
    """A DAG fenceline knows by its runs (it keeps no DAG files)."""
    return dag_response(dag_id, service.get_dag(session, dag_id))


@router.get("/dags/{dag_id}/details")
def get_dag_details(dag_id: str, session: SessionDep) -> DAGDetailsResponse:
    return dag_details(dag_id, service.get_dag(session, dag_id))


@router.get("/dags/{dag_id}/tasks", responses=BAD_REQUEST)
def get_tasks(dag_id: str, session: SessionDep, params: honouring(TasksQuery)) -> TaskCollectionResponse:
    """The tasks of the DAG's latest run (a DAG is known by its runs)."""
    tasks = listing.ordered([task_response(t) for t in listing.dag_tasks(session, dag_id)], params.order_by,
                            listing.TASK_KEYS)
    return TaskCollectionResponse(tasks=tasks, total_entries=len(tasks))


@router.get("/dags/{dag_id}/tasks/{task_id}")
def get_task(dag_id: str, task_id: str, session: SessionDep) -> TaskResponse:
    return task_response(listing.dag_task(session, dag_id, task_id))


@router.get("/dags/{dag_id}/dagRuns", responses=BAD_REQUEST)
def get_dag_runs(dag_id: str, session: SessionDep, params: honouring(DagRunsQuery)) -> DAGRunCollectionResponse:
    """The DAG's runs; `~` lists every DAG's."""
    runs, total = listing.list_runs(session, dag_id, params, listing.RUN_ORDER(params.order_by), params.limit,
                                    params.offset)
    return DAGRunCollectionResponse(dag_runs=[run_response(r) for r in runs], total_entries=total)


@router.post("/dags/{dag_id}/dagRuns/list", responses=BAD_REQUEST)
def get_dag_runs_batch(dag_id: Literal["~"], body: DAGRunsBatchBody, session: SessionDep) -> DAGRunCollectionResponse:
    """Runs across DAGs, filtered by the body (Airflow 3's batch read; a read, though a POST)."""
    body.refuse()
    order = listing.RUN_ORDER([body.order_by] if body.order_by else ["id"])
    runs, total = listing.list_runs(session, WILDCARD, body, order, body.page_limit, body.page_offset)
    return DAGRunCollectionResponse(dag_runs=[run_response(r) for r in runs], total_entries=total)


@router.get(RUN)
def get_dag_run(dag_id: str, dag_run_id: str, session: SessionDep) -> DAGRunResponse:
    return run_response(service.get_run(session, dag_id, dag_run_id))


@router.get(TI, responses=BAD_REQUEST)
def get_task_instances(dag_id: str, dag_run_id: str, session: SessionDep,
                       params: honouring(TaskInstancesQuery)) -> TaskInstanceCollectionResponse:
    """The run's task instances; `~` for the run (and the DAG) lists across runs."""
    if dag_id == WILDCARD and dag_run_id != WILDCARD:
        raise bad_request("dag_id is required when dag_run_id is specified")
    tis, total = listing.list_task_instances(session, dag_id, dag_run_id, params, listing.TI_ORDER(params.order_by),
                                             params.limit, params.offset)
    return TaskInstanceCollectionResponse(task_instances=ti_responses(session, tis), total_entries=total)


@router.post(TI + "/list", responses=BAD_REQUEST)
def get_task_instances_batch(dag_id: Literal["~"], dag_run_id: Literal["~"], body: TaskInstancesBatchBody,
                             session: SessionDep) -> TaskInstanceCollectionResponse:
    """Task instances across DAGs and runs, filtered by the body (Airflow 3's batch read)."""
    body.refuse()
    order = listing.TI_ORDER([body.order_by] if body.order_by else ["map_index"])
    tis, total = listing.list_task_instances(session, WILDCARD, WILDCARD, body, order, body.page_limit,
                                             body.page_offset)
    return TaskInstanceCollectionResponse(task_instances=ti_responses(session, tis), total_entries=total)


@router.get(TI + "/{task_id}/listMapped", responses=BAD_REQUEST)
def get_mapped_task_instances(dag_id: str, dag_run_id: str, task_id: str, session: SessionDep,
                              params: honouring(MappedTaskInstancesQuery)) -> TaskInstanceCollectionResponse:
    """The mapped task instances of one task of the run (404 for a task that is not mapped)."""
    tis, total = listing.list_mapped(session, dag_id, dag_run_id, task_id, params, listing.TI_ORDER(params.order_by),
                                     params.limit, params.offset)
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
    log = service.get_try_log(session, store, ti, try_number)
    start = framing.start_position(installation(request).keyring, token, ti.id, try_number, log)
    win = paging.window(store.within(session), log, start, full=full_content or ndjson)
    next_token = framing.continuation_token(installation(request).keyring, win, ti.id, try_number)
    size = win.end - win.start
    if ndjson:
        headers = {"Airflow-Continuation-Token": next_token} if next_token else None
        return framing.answer(session, store, lambda reader: paging.batched(
            part + b"\n" for part in framing.structured_parts(reader, log, win.start, win.end, b"\n")),
            size, "application/x-ndjson", headers)
    return framing.answer(session, store, lambda reader: paging.batched(_json_log(
        framing.structured_parts(reader, log, win.start, win.end, b","), next_token)), size, "application/json")


def _json_log(parts: Iterator[bytes], next_token: str | None) -> Iterator[bytes]:
    yield b'{"content":['
    for n, part in enumerate(parts):
        yield (b"," if n else b"") + part
    yield b'],"continuation_token":' + json.dumps(next_token).encode() + b"}"


@router.get(TI + "/{task_id}/" + MAP_INDEX)
def get_mapped_task_instance(dag_id: str, dag_run_id: str, task_id: str, map_index: int,
                             session: SessionDep) -> TaskInstanceResponse:
    ti = service.get_task_instance(session, dag_id, dag_run_id, task_id, map_index, mapped_route=True)
    return ti_responses(session, [ti])[0]


@router.get(TI + "/{task_id}/" + MAP_INDEX + "/tries")
def get_mapped_task_instance_tries(dag_id: str, dag_run_id: str, task_id: str, map_index: int,
                                   session: SessionDep) -> TaskInstanceHistoryCollectionResponse:
    return _tries(session, dag_id, dag_run_id, task_id, map_index)


@router.get(TI + "/{task_id}/" + MAP_INDEX + "/tries/{task_try_number}")
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

@router.get("/pools", responses=BAD_REQUEST)
def get_pools(session: SessionDep, params: honouring(PoolsQuery)) -> PoolCollectionResponse:
    """The pools (POST /v1/pools makes them), each with the slots its task instances hold:
    queued and running (occupied), scheduled, and open."""
    uses, total = listing.list_pools(session, params, listing.POOL_ORDER(params.order_by), params.limit,
                                     params.offset)
    return PoolCollectionResponse(pools=[PoolResponse(**service.pool_fields(u)) for u in uses], total_entries=total)


@router.get("/pools/{pool_name}")
def get_pool(pool_name: str, session: SessionDep) -> PoolResponse:
    return PoolResponse(**service.pool_fields(service.get_pool(session, pool_name)))


@router.get("/jobs", responses=BAD_REQUEST)
def get_jobs(params: honouring(JobsQuery)) -> JobCollectionResponse:
    """Airflow's scheduler and triggerer jobs: fenceline runs none (its readiness and sweeps run
    inside the API server), so the list is empty, whatever it is filtered by."""
    listing.JOB_ORDER(params.order_by)
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
    status, beat = service.scheduler_health(request.app.state.read_engine)
    return HealthInfoResponse(
        metadatabase=BaseInfoResponse(status=status),
        scheduler=SchedulerInfoResponse(status=status, latest_scheduler_heartbeat=beat),
        triggerer=TriggererInfoResponse(status=None, latest_triggerer_heartbeat=None))


@cli_login_router.post("/auth/token/cli", status_code=201, responses={
    400: {"description": "Username and password must be provided"}, 401: {"description": "Invalid credentials"},
    429: {"description": "Too many failed logins"}})
def cli_login(body: LoginBody, request: Request, response: Response) -> LoginResponse:
    """Airflow's CLI login (airflowctl `auth login`): the operator's username and password for a
    bearer token. Any Authorization header sent along (a re-login's stale token) is ignored. The
    device cookie is set as by every login (its token is not in Airflow's answer)."""
    if not body.username or not body.password:
        raise bad_request("Username and password must be provided")
    check_password(request, body.username, body.password, refusal="Invalid credentials")  # throttled as every login
    remember_device(request, response, body.username)
    return LoginResponse(access_token=operator_token(request, body.username))


add_absent_routes(router, "Airflow 3")
