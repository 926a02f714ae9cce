"""Operations endpoints (contract 8): liveness, readiness, health, and Prometheus metrics."""

import logging
from collections.abc import Iterator
from typing import Any

from fastapi import Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from app.auth.deps import MetricsReaderDep
from app.db.dialect import dialect_of
from app.errors import AppError
from app.logs.stores.base import LogStoreFault
from app.orchestration import states
from app.orchestration.counts import count_by_state
from app.telemetry.metrics import Recorded, exposition
from app.web.deps import SessionDep
from app.web.problems import problems
from app.web.routes import Router

router = Router(tags=["operations"])
log = logging.getLogger("fenceline.health")


class TaskInstancesByState(Collector):
    """fenceline_task_instances{state}: the kept counts at scrape time (one statement that costs
    the same however much history is kept; every state listed, zero included, so an alert on a
    state sees it go to zero)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        with self.engine.connect() as conn:
            counts = count_by_state(conn=conn)
        family = GaugeMetricFamily("fenceline_task_instances", "Task instances by state, counted at scrape time.",
                                   labels=["state"])
        for state in states.ALL:
            family.add_metric([str(state)], counts.get(str(state), 0))
        yield family


def scrape_registry(read_engine: Engine) -> CollectorRegistry:
    """The registry /metrics renders for one application: what was recorded, and what the
    database says now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Recorded())
    registry.register(TaskInstancesByState(read_engine))
    return registry


@router.get("/health", responses=problems(503))
def health(session: SessionDep) -> dict[str, str]:
    """200 when the service and its database answer (an unreachable database is a 503)."""
    session.execute(text("SELECT 1")).scalar_one()
    return {"status": "ok", "database": dialect_of(session).name}


@router.get("/health/live")
async def health_live() -> dict[str, str]:
    """200 while the process answers (liveness: nothing else is asked)."""
    return {"status": "ok"}


def readiness(state: Any) -> dict[str, str]:
    """Each readiness check and what it found: `ok`, or why not."""
    from app.fleet.window import refusal
    from app.ops.migrate import chain

    checks: dict[str, str] = {}
    try:
        with state.read_engine.connect() as conn:
            why = refusal(conn, chain())
        checks["database"] = "ok"
        checks["schema"] = "ok" if why is None else why
    except SQLAlchemyError as exc:
        checks["database"] = f"does not answer ({type(exc).__name__})"
        checks["schema"] = "unknown (the database does not answer)"
    if state.drain.draining:
        checks["serving"] = "stopping (SIGTERM): the requests in flight finish, no new claims start"
    try:
        state.log_store.probe()
        checks["log_store"] = "ok"
    except (LogStoreFault, OSError) as exc:
        checks["log_store"] = f"the {state.log_store.name} store cannot be written ({exc})"
    return checks


@router.get("/health/ready", responses=problems(503))
def health_ready(request: Request) -> dict[str, Any]:
    """200 when this replica can serve: the database answers, this version serves its schema
    (at the migrations' head, or within the window of contract 10.1), the log store takes a
    write, and it is not stopping (draining). 503 `not-ready` naming what is not, otherwise."""
    checks = readiness(request.app.state)
    failed = {name: why for name, why in checks.items() if why != "ok"}
    if failed:
        log.warning("not ready: %s", failed)
        raise AppError(503, "not-ready", "Not ready", "; ".join(f"{k}: {v}" for k, v in failed.items()),
                       checks=checks)
    return {"status": "ready", "checks": checks}


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}}, **problems(401, 403)})
def metrics(request: Request, _: MetricsReaderDep) -> Response:
    """Prometheus text exposition: a metrics token (POST /v1/auth/metrics-tokens), an operator's
    bearer token, or the operator's HTTP Basic."""
    body, media_type = exposition(request.app.state.metrics_registry)
    return Response(body, media_type=media_type)
