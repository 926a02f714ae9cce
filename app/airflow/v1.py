"""/api/v1: Airflow 2.10's read routes, shapes and problem+json errors, HTTP Basic auth."""

from collections.abc import Iterator
from datetime import datetime
from http import HTTPStatus
from typing import Annotated, Any, Literal

from fastapi import Depends, Header, Request
from fastapi.responses import Response

from app import __version__
from app.airflow import framing, listing, service
from app.airflow.absent_resources import MAP_INDEX, add_absent_routes
from app.airflow.list_params import (
    NO_FIELDS,
    DagRunsBatchBodyV1,
    DagRunsQueryV1,
    DagsQueryV1,
    MappedTaskInstancesQueryV1,
    PoolsQueryV1,
    TaskInstancesBatchBodyV1,
    TaskInstancesQueryV1,
    TasksQueryV1,
    TriesQueryV1,
)
from app.airflow.params import MAX_PAGE, honouring, refusing
from app.airflow.service import WILDCARD
from app.airflow.v1_schemas import (
    DAG,
    DAGCollection,
    DAGDetail,
    DagProcessorInfo,
    DAGRun,
    DAGRunCollection,
    HealthInfo,
    InstanceLog,
    Pool,
    PoolCollection,
    Task,
    TaskCollection,
    TaskInstance,
    TaskInstanceCollection,
    dag_detail,
    dag_model,
    run_model,
    task_model,
    try_model,
)
from app.airflow.v2_schemas import BaseInfoResponse, SchedulerInfoResponse, TriggererInfoResponse, VersionInfo
from app.auth import tokens
from app.auth.deps import BasicDep, BearerDep, checked_before_body, installation, require_operator_or_basic
from app.errors import AppError, unauthorized
from app.logs import paging
from app.logs.deps import StoreDep
from app.logs.stores.base import LogStore
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
        if errors := extra.get("errors"):  # in connexion's words: what is wrong, then which parameter
            where = errors[0]["loc"][1:2] or errors[0]["loc"]
            detail = f"{errors[0]['msg']} - '{where[0]}'"
    name, airflow_title = _ERROR_NAMES.get(status, ("Unknown", HTTPStatus(status).phrase))
    return problem_response(status, ERRORS_DOC + name, airflow_title, detail, headers=headers)


# Connexion refuses bad parameters with 400, never 422; HTTP Basic may be throttled (429).
register_error_family(PREFIX, ErrorFamily(render=_render, documented=lambda s: problems(s)[s],
                                          answers=(400, 413, 429, 503), never=(422,)))


@checked_before_body(tokens.OPERATOR_SCOPE, basic=True)
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
RUN = "/dags/{dag_id}/dagRuns/{dag_run_id}"
TI = RUN + "/taskInstances"


def ti_models(session: SessionDep, tis: list[TaskInstanceRow]) -> list[TaskInstance]:
    return [try_model(view) for view in service.current_tries(session, tis)]


# --- routes ---------------------------------------------------------------------------------

@router.get("/health")
def get_health(request: Request) -> HealthInfo:
    """Airflow 2.10's health shape: the metadatabase is fenceline's database; the scheduler's
    work runs inside this server; there is no triggerer or DAG processor. Asks for credentials
    (Airflow 2.10 does not): contract 6 names the routes open without them."""
    status, beat = service.scheduler_health(request.app.state.read_engine)
    return HealthInfo(metadatabase=BaseInfoResponse(status=status),
                      scheduler=SchedulerInfoResponse(status=status, latest_scheduler_heartbeat=beat),
                      triggerer=TriggererInfoResponse(status=None, latest_triggerer_heartbeat=None),
                      dag_processor=DagProcessorInfo(status=None, latest_dag_processor_heartbeat=None))


@router.get("/version")
def get_version() -> VersionInfo:
    return VersionInfo(version=__version__, git_version=None)


@router.get("/dags")
def get_dags(session: SessionDep, params: honouring(DagsQueryV1)) -> DAGCollection:
    dags, total = listing.list_dags(session, params, listing.DAG_ORDER_V1([params.order_by]), params.limit,
                                    params.offset)
    return DAGCollection(total_entries=total, dags=[dag_model(dag_id, first) for dag_id, first in dags])


@router.get("/dags/{dag_id}", dependencies=[Depends(refusing({"fields": NO_FIELDS}))])
def get_dag(dag_id: str, session: SessionDep) -> DAG:
    """A DAG fenceline knows by its runs (it keeps no DAG files)."""
    return dag_model(dag_id, _first_run(session, dag_id))


@router.get("/dags/{dag_id}/details", dependencies=[Depends(refusing({"fields": NO_FIELDS}))])
def get_dag_details(dag_id: str, session: SessionDep) -> DAGDetail:
    return dag_detail(dag_id, _first_run(session, dag_id))


@router.get("/dags/{dag_id}/tasks")
def get_tasks(dag_id: str, session: SessionDep, params: honouring(TasksQueryV1)) -> TaskCollection:
    """The tasks of the DAG's latest run (a DAG is known by its runs)."""
    tasks = [task_model(t) for t in listing.dag_tasks(session, dag_id)]
    tasks = listing.ordered(tasks, params.order_by, listing.TASK_KEYS)
    return TaskCollection(tasks=tasks, total_entries=len(tasks))


@router.get("/dags/{dag_id}/tasks/{task_id}")
def get_task(dag_id: str, task_id: str, session: SessionDep) -> Task:
    return task_model(listing.dag_task(session, dag_id, task_id))


@router.get("/pools")
def get_pools(session: SessionDep, params: honouring(PoolsQueryV1)) -> PoolCollection:
    """The pools, with their slot use."""
    uses, total = listing.list_pools(session, params, listing.POOL_ORDER_V1([params.order_by]), params.limit,
                                     params.offset)
    return PoolCollection(pools=[Pool(**service.pool_fields(u)) for u in uses], total_entries=total)


@router.get("/pools/{pool_name}")
def get_pool(pool_name: str, session: SessionDep) -> Pool:
    return Pool(**service.pool_fields(service.get_pool(session, pool_name)))


@router.get("/dags/{dag_id}/dagRuns")
def get_dag_runs(dag_id: str, session: SessionDep, params: honouring(DagRunsQueryV1)) -> DAGRunCollection:
    """The DAG's runs; `~` lists every DAG's."""
    runs, total = listing.list_runs(session, dag_id, params, listing.RUN_ORDER_V1([params.order_by]), params.limit,
                                    params.offset)
    return DAGRunCollection(dag_runs=[run_model(r) for r in runs], total_entries=total)


@router.post("/dags/{dag_id}/dagRuns/list")
def get_dag_runs_batch(dag_id: Literal["~"], body: DagRunsBatchBodyV1, session: SessionDep) -> DAGRunCollection:
    """Runs across DAGs, filtered by the body (a read, though a POST)."""
    runs, total = listing.list_runs(session, WILDCARD, body, listing.RUN_ORDER_V1([body.order_by]), body.page_limit,
                                    body.page_offset)
    return DAGRunCollection(dag_runs=[run_model(r) for r in runs], total_entries=total)


@router.get(RUN, dependencies=[Depends(refusing({"fields": NO_FIELDS}))])
def get_dag_run(dag_id: str, dag_run_id: str, session: SessionDep) -> DAGRun:
    return run_model(service.get_run(session, dag_id, dag_run_id))


@router.get(TI)
def get_task_instances(dag_id: str, dag_run_id: str, session: SessionDep,
                       params: honouring(TaskInstancesQueryV1)) -> TaskInstanceCollection:
    """The run's task instances; `~` for the run and/or the DAG lists across them (Airflow 2.10
    filters by run id when only the DAG is `~`)."""
    tis, total = listing.list_task_instances(session, dag_id, dag_run_id, params, listing.TI_TIES, params.limit,
                                             params.offset)
    return TaskInstanceCollection(task_instances=ti_models(session, tis), total_entries=total)


@router.post(TI + "/list")
def get_task_instances_batch(dag_id: Literal["~"], dag_run_id: Literal["~"], body: TaskInstancesBatchBodyV1,
                             session: SessionDep) -> TaskInstanceCollection:
    """Task instances across DAGs and runs, filtered by the body (Airflow 2.10 pages none: the
    first MAX_PAGE, and total_entries says how many there are)."""
    body.refuse()
    tis, total = listing.list_task_instances(session, WILDCARD, WILDCARD, body, listing.TI_TIES, MAX_PAGE, 0)
    return TaskInstanceCollection(task_instances=ti_models(session, tis), total_entries=total)


@router.get(TI + "/{task_id}/listMapped")
def get_mapped_task_instances(dag_id: str, dag_run_id: str, task_id: str, session: SessionDep,
                              params: honouring(MappedTaskInstancesQueryV1)) -> TaskInstanceCollection:
    """The mapped task instances of one task of the run (404 for a task that is not mapped)."""
    tis, total = listing.list_mapped(session, dag_id, dag_run_id, task_id, params,
                                     listing.TI_ORDER([params.order_by]), params.limit, params.offset)
    return TaskInstanceCollection(task_instances=ti_models(session, tis), total_entries=total)


@router.get(TI + "/{task_id}")
def get_task_instance(dag_id: str, dag_run_id: str, task_id: str, session: SessionDep) -> TaskInstance:
    ti = service.get_task_instance(session, dag_id, dag_run_id, task_id, -1, mapped_route=False)
    return ti_models(session, [ti])[0]


@router.get(TI + "/{task_id}/tries")
def get_task_instance_tries(dag_id: str, dag_run_id: str, task_id: str, session: SessionDep,
                            params: honouring(TriesQueryV1), map_index: int = -1) -> TaskInstanceCollection:
    return _tries(session, dag_id, dag_run_id, task_id, map_index, params)


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
    log = service.get_try_log(session, store, ti, task_try_number)
    media = framing.preferred(accept, ["text/plain", "application/json"], default="application/json")
    if media == "text/plain":
        return framing.answer(session, store, lambda reader: paging.batched(
            paging.text_chunks(reader, log, 0, log.size)), log.size, "text/plain; charset=utf-8")
    start = framing.start_position(installation(request).keyring, token, ti.id, task_try_number, log)
    win = paging.window(store.within(session), log, start, full=full_content)
    # Airflow 2 always answers a token; at the end of a finished log it reads as "nothing more".
    next_token = tokens.sign_cursor(installation(request).keyring, ti.id, task_try_number, win.end)

    def body(reader: LogStore) -> Iterator[bytes]:
        return paging.batched(part for parts in (
            ['{"content":"'], framing.json_string_stream(reader, log, win.start, win.end),
            ['","continuation_token":"' + next_token + '"}']) for part in parts)
    return framing.answer(session, store, body, win.end - win.start, "application/json")


@router.get(TI + "/{task_id}/" + MAP_INDEX)
def get_mapped_task_instance(dag_id: str, dag_run_id: str, task_id: str, map_index: int,
                             session: SessionDep) -> TaskInstance:
    ti = service.get_task_instance(session, dag_id, dag_run_id, task_id, map_index, mapped_route=True)
    return ti_models(session, [ti])[0]


@router.get(TI + "/{task_id}/" + MAP_INDEX + "/tries")
def get_mapped_task_instance_tries(dag_id: str, dag_run_id: str, task_id: str, map_index: int,
                                   session: SessionDep, params: honouring(TriesQueryV1)) -> TaskInstanceCollection:
    return _tries(session, dag_id, dag_run_id, task_id, map_index, params)


@router.get(TI + "/{task_id}/" + MAP_INDEX + "/tries/{task_try_number}")
def get_mapped_task_instance_try_details(dag_id: str, dag_run_id: str, task_id: str, map_index: int,
                                         task_try_number: int, session: SessionDep) -> TaskInstance:
    ti = service.get_task_instance(session, dag_id, dag_run_id, task_id, map_index, mapped_route=True)
    return try_model(service.get_try(session, ti, task_try_number))


def _tries(session: SessionDep, dag_id: str, run_id: str, task_id: str, map_index: int,
           params: TriesQueryV1) -> TaskInstanceCollection:
    """A page of the tries, in `order_by` (try_number by default)."""
    ti = service.get_task_instance(session, dag_id, run_id, task_id, map_index, mapped_route=True)
    views = listing.ordered_tries(service.tries(session, ti), params.order_by)
    page = views[params.offset:params.offset + params.limit]
    return TaskInstanceCollection(task_instances=[try_model(v) for v in page], total_entries=len(views))


def _first_run(session: SessionDep, dag_id: str) -> datetime:
    """The DAG's first run; 404 in Airflow 2.10's words."""
    try:
        return service.get_dag(session, dag_id)
    except AppError as exc:
        if exc.status == 404:
            raise service.not_found(f"DAG with dag_id: '{dag_id}' not found") from None
        raise


add_absent_routes(router, "Airflow 2.10")
