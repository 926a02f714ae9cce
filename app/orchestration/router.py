"""HTTP for runs and task instances (the operator rails that fence attempts off are served by
execution/router.py, next to the service they call)."""

import uuid
from typing import Annotated

from fastapi import Query, Request

from app.auth.deps import OperatorDep
from app.orchestration import runs
from app.orchestration.schemas import RunCreate, RunPublic, RunsPublic, TaskInstancePublic, run_public, ti_public
from app.telemetry.tracing import current_trace_id, run_created
from app.web.deps import SessionDep, commit
from app.web.problems import problems
from app.web.routes import Router

router = Router(prefix="/v1", tags=["orchestration"], responses=problems(401, 403, 422))


@router.post("/runs", status_code=201, responses=problems(409))
def create_run(body: RunCreate, session: SessionDep, request: Request, _: OperatorDep) -> RunPublic:
    """Create a DAG run with its tasks; tasks without upstreams are ready at once. Without a
    `trace_id`, the run's trace is the request's (its `traceparent`'s), else a new one."""
    if body.trace_id is None and (trace_id := current_trace_id()) is not None:
        body = body.model_copy(update={"trace_id": trace_id})
    run, tis = runs.create_run(session=session, request=body, check_routes=request.app.state.check_routes)
    commit(session)  # the run's root span is exported only for a run that exists
    run_created(run.trace_id, run.dag_id, run.run_id)
    return run_public(run, tis)


@router.get("/runs")
def list_runs(session: SessionDep, _: OperatorDep, dag_id: str | None = None,
              limit: Annotated[int, Query(ge=1, le=500)] = 50,
              offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0) -> RunsPublic:
    found, total = runs.list_runs(session=session, limit=limit, offset=offset, dag_id=dag_id)
    tis = runs.runs_task_instances(session=session, dag_run_ids=[r.id for r in found])
    items = [run_public(r, tis[r.id]) for r in found]
    return RunsPublic(items=items, total_entries=total, limit=limit, offset=offset)


@router.get("/runs/{dag_id}/{run_id}", responses=problems(404))
def read_run(dag_id: str, run_id: str, session: SessionDep, _: OperatorDep) -> RunPublic:
    return run_public(*runs.get_run_with_task_instances(session=session, dag_id=dag_id, run_id=run_id))


@router.get("/task-instances/{ti_id}", responses=problems(404))
def read_task_instance(ti_id: uuid.UUID, session: SessionDep, _: OperatorDep) -> TaskInstancePublic:
    return ti_public(runs.get_task_instance(session=session, ti_id=ti_id))
