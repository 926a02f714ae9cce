"""Wire schemas of runs and task instances. Request bodies forbid unknown fields."""

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Field,
    StringConstraints,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapSerializer,
    WrapValidator,
    model_validator,
)

from app.orchestration.models import DagRun, TaskInstance
from app.orchestration.routes import DEFAULT_POOL, DEFAULT_QUEUE, PriorityWeight, RouteName
from app.web.schemas import FreeForm, Strict

# Identifiers become log path segments: never "." or "..", so none may start with a dot.
Ident = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,249}$")]
# Airflow's run ids carry timestamps (manual__2026-11-30T00:00:00+00:00).
RunId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_~:+\-][A-Za-z0-9_.~:+\-]{0,249}$")]


# Contract 2.4: the infra budget counts re-places as Airflow's `retries` counts retries.
MAX_INFRA_ATTEMPTS = (
    "How many times an infrastructure fault (evicted, oom_killed, node_lost, ...) is re-placed on the "
    "same try: a fault is re-placed while infra_attempts is below max_infra_attempts, and the fault after "
    "the last re-place ends the task instance in infra_failed (with 3, the fourth fault is terminal). "
    "A new try starts with a fresh budget."
)


class Resources(Strict):
    cpu: Annotated[str, StringConstraints(max_length=32)] | None = None
    memory: Annotated[str, StringConstraints(max_length=32)] | None = None
    gpu: Annotated[int, Field(ge=0)] | None = None


class Payload(Strict):
    """The work: a command (local) or an image (kubernetes), with args, env and resources."""

    command: list[Annotated[str, StringConstraints(max_length=4096)]] | None = None
    image: Annotated[str, StringConstraints(min_length=1, max_length=512)] | None = None
    args: list[Annotated[str, StringConstraints(max_length=4096)]] = []
    # additionalProperties alongside the key pattern: SDK generators read the map's value type there.
    env: Annotated[dict[Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], str],
                   Field(json_schema_extra={"additionalProperties": {"type": "string"}})] = {}
    resources: Resources | None = None
    timeout_seconds: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _something_to_run(self) -> "Payload":
        if not self.command and not self.image:
            raise ValueError("a payload needs a command or an image")
        return self


def _as_read(stored: Any, validate: ValidatorFunctionWrapHandler) -> Payload:
    """A stored payload: every one POST /v1/runs stored is a Payload; one that is not (a
    restored snapshot's) is shown as stored rather than failing the read."""
    try:
        return validate(stored)
    except ValidationError:
        return Payload.model_construct(**stored) if isinstance(stored, dict) else Payload.model_construct()


def _as_stored(payload: Payload, _: Any):  # unannotated: pydantic would document the annotation, not Payload
    return payload.model_dump(mode="json", exclude_none=True, warnings=False)


# A payload as a response shows it: typed as Payload (so generated SDKs hand back a typed
# object), sent as it was stored (the members the run set, no nulls for the others).
StoredPayload = Annotated[Payload, WrapValidator(_as_read), WrapSerializer(_as_stored)]


class TaskCreate(Strict):
    task_id: Ident
    map_index: Annotated[int, Field(ge=-1)] = -1
    payload: Payload
    retries: Annotated[int, Field(ge=0, le=1000)] = 0
    retry_delay: Annotated[float, Field(ge=0, le=7 * 86400)] = 300.0
    max_infra_attempts: Annotated[int, Field(ge=0, le=1000, description=MAX_INFRA_ATTEMPTS)] = 3
    upstream: list[Ident] = []
    idempotent: bool = True
    queue: RouteName = Field(DEFAULT_QUEUE, description="Only claims serving this queue take the task.")
    pool: RouteName = Field(DEFAULT_POOL, description="The pool whose slots the task holds while queued or running.")
    pool_slots: Annotated[int, Field(ge=1, le=1_000_000, strict=True)] = 1
    priority_weight: PriorityWeight = Field(1, description="Higher weights are claimed first.")


class RunCreate(Strict):
    dag_id: Ident
    run_id: RunId | None = None
    tenant_id: Annotated[str, StringConstraints(max_length=250)] | None = None
    trace_id: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9\-]{1,64}$")] | None = None
    conf: FreeForm = {}
    tasks: Annotated[list[TaskCreate], Field(min_length=1, max_length=10_000)]

    @model_validator(mode="after")
    def _a_dag(self) -> "RunCreate":
        keys = [(t.task_id, t.map_index) for t in self.tasks]
        if len(set(keys)) != len(keys):
            raise ValueError("tasks repeat a (task_id, map_index)")
        upstream = {t.task_id: set(t.upstream) for t in self.tasks}
        for task_id, ups in upstream.items():
            if missing := ups - upstream.keys():
                raise ValueError(f"task {task_id!r} names unknown upstream tasks {sorted(missing)}")
        done: set[str] = set()
        while len(done) < len(upstream):  # Kahn's algorithm: what never becomes ready is a cycle
            ready = {t for t, ups in upstream.items() if t not in done and ups <= done}
            if not ready:
                raise ValueError(f"the tasks' upstreams form a cycle among {sorted(upstream.keys() - done)}")
            done |= ready
        return self


class TaskInstancePublic(BaseModel):
    ti_id: uuid.UUID
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    state: str
    try_number: int
    max_tries: int
    attempt_epoch: int
    infra_attempts: int
    max_infra_attempts: int = Field(description=MAX_INFRA_ATTEMPTS)
    last_failure_kind: Literal["app", "infra"] | None
    last_failure_reason: str | None
    execution_id: uuid.UUID | None
    idempotent: bool
    retries: int
    retry_delay: float
    queue: str
    pool: str
    pool_slots: int
    priority_weight: int
    upstream: list[str]
    payload: StoredPayload
    next_eligible_at: datetime | None
    last_heartbeat_at: datetime | None
    queued_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    updated_at: datetime


class RunPublic(BaseModel):
    dag_id: str
    run_id: str
    state: str
    tenant_id: str | None
    trace_id: str
    conf: dict[str, Any]
    created_at: datetime
    ended_at: datetime | None
    task_instances: list[TaskInstancePublic]


class RunsPublic(BaseModel):
    items: list[RunPublic]
    total_entries: int
    limit: int
    offset: int


class MarkRequest(Strict):
    state: Literal["success", "failed"]


# --- presentation: table rows as their wire shapes ------------------------------------------

def ti_public(ti: TaskInstance) -> TaskInstancePublic:
    return TaskInstancePublic(
        ti_id=ti.id, dag_id=ti.dag_id, run_id=ti.run_id, task_id=ti.task_id, map_index=ti.map_index,
        state=ti.state, try_number=ti.try_number, max_tries=ti.max_tries, attempt_epoch=ti.attempt_epoch,
        infra_attempts=ti.infra_attempts, max_infra_attempts=ti.max_infra_attempts,
        last_failure_kind=ti.last_failure_kind, last_failure_reason=ti.last_failure_reason,
        execution_id=ti.execution_id, idempotent=ti.idempotent, retries=ti.retries,
        retry_delay=ti.retry_delay_seconds, queue=ti.queue, pool=ti.pool, pool_slots=ti.pool_slots,
        priority_weight=ti.priority_weight, upstream=ti.upstream_task_ids, payload=ti.payload,
        next_eligible_at=ti.next_eligible_at, last_heartbeat_at=ti.last_heartbeat_at, queued_at=ti.queued_at,
        started_at=ti.started_at, ended_at=ti.ended_at, updated_at=ti.updated_at,
    )


def run_public(run: DagRun, tis: list[TaskInstance]) -> RunPublic:
    return RunPublic(dag_id=run.dag_id, run_id=run.run_id, state=run.state, tenant_id=run.tenant_id,
                     trace_id=run.trace_id, conf=run.conf, created_at=run.created_at, ended_at=run.ended_at,
                     task_instances=[ti_public(ti) for ti in tis])
