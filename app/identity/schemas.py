"""Wire schemas of the identity domain. Request bodies forbid unknown fields."""

import uuid
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, StringConstraints, ValidationInfo, field_validator

from app.identity.models import Execution, Seat
from app.web.schemas import FreeForm, Problem, Strict

SeatName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,126}[A-Za-z0-9])?$")]
RuntimeBackend = Literal["local", "kubernetes"]
Name = Annotated[str, StringConstraints(min_length=1, max_length=253)]


class KubernetesTarget(Strict):
    pod_namespace: Name
    pod_name: Name
    pod_uid: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None


class LocalTarget(Strict):
    server_id: Name | None = None
    process_namespace: Name | None = None
    pid: Annotated[int, Field(gt=0, le=2**31 - 1)] | None = None


def parse_target(backend: str, target: dict[str, Any] | None) -> KubernetesTarget | LocalTarget | None:
    """The target for its backend; raises ValueError (a 422) for anything else."""
    if backend == "kubernetes":
        if target is None:
            raise ValueError("a kubernetes execution needs runtime_target with pod_namespace and pod_name")
        return KubernetesTarget.model_validate(target)
    return None if target is None else LocalTarget.model_validate(target)


Labels = dict[str, str]  # a seat's and an execution's labels, as clients write them


class SeatRecord(Strict):
    """The plain seat record, as a plain writer sends it."""

    swarm: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    role: Annotated[str, StringConstraints(max_length=128)] | None = None
    labels: Labels = {}


class SeatPut(SeatRecord):
    runtime_backend: RuntimeBackend = "local"
    runtime_target: FreeForm | None = None


class AdmissionRequest(SeatRecord):
    runtime_backend: RuntimeBackend
    # Validated against the backend as a field (not the whole model), so that a 422 names
    # runtime_target and the offending member, e.g. body.runtime_target.pid.
    runtime_target: dict[str, Any] | None = Field(default=None, validate_default=True)
    previous_execution_id: uuid.UUID | None = None

    @field_validator("runtime_target")
    @classmethod
    def _target_matches_backend(cls, value: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        target = parse_target(info.data.get("runtime_backend", "local"), value)
        return None if target is None else target.model_dump(exclude_none=True)


class Observation(Strict):
    phase: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    reason: Annotated[str, StringConstraints(max_length=256)] | None = None
    exit_code: int | None = None
    terminal: bool = False
    observed_at: datetime

    @field_validator("observed_at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("observed_at must carry a timezone")
        return value


class ExecutionPatch(Strict):
    """Binds pod_uid once and records the latest observation. The immutable fields may be
    repeated; a different value is refused as identity-conflict."""

    pod_uid: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
    observation: Observation | None = None
    seat: str | None = None
    swarm: str | None = None
    role: str | None = None
    labels: Labels | None = None
    generation: int | None = None
    previous_execution_id: uuid.UUID | None = None
    runtime_backend: RuntimeBackend | None = None
    runtime_target: FreeForm | None = None


class ResumeWrite(Strict):
    expected_execution_id: uuid.UUID
    resume_token: Annotated[str, StringConstraints(max_length=65536)] | None = None
    last_message_id: Annotated[str, StringConstraints(max_length=256)] | None = None
    context_window: Annotated[int, Field(ge=0)] | None = None


class ExecutionPublic(BaseModel):
    execution_id: uuid.UUID
    seat: str
    swarm: str
    role: str | None
    labels: dict[str, Any]
    generation: int
    previous_execution_id: uuid.UUID | None
    superseded: bool
    runtime_backend: RuntimeBackend
    runtime_target: dict[str, Any] | None
    observation: Observation | None
    created_at: datetime
    updated_at: datetime


class AdmissionPublic(ExecutionPublic):
    worker_token: str


class ExecutionsPublic(BaseModel):
    items: list[ExecutionPublic]


class SeatPublic(BaseModel):
    """The plain seat record plus the additive identity of its latest execution."""

    seat: str
    swarm: str
    role: str | None
    labels: dict[str, Any]
    runtime_backend: RuntimeBackend
    runtime_target: dict[str, Any] | None
    resume_token: str | None
    last_message_id: str | None
    context_window: int | None
    updated_at: datetime
    execution_id: uuid.UUID | None
    generation: int
    execution: ExecutionPublic | None


class OccupantsPublic(BaseModel):
    items: list[ExecutionPublic]


class ExecutionConflict(Problem):
    """409: an admission, binding or seat write refused (contract 1). `current_execution_id` (and,
    for `stale-predecessor`, `current_generation`) name the seat's execution now, so a launcher
    can retry naming it."""

    STATUSES: ClassVar[tuple[int, ...]] = (409,)
    type: Literal["stale-predecessor", "stale-update", "execution-rotated", "identity-conflict", "pod-uid-reused",
                  "admission-required", "idempotency-key-reused", "conflict"]
    current_execution_id: uuid.UUID | None = None
    current_generation: int | None = None


# --- presentation: table rows as their wire shapes ------------------------------------------

def execution_public(e: Execution) -> ExecutionPublic:
    target = None
    if e.has_target:
        fields = ("pod_namespace", "pod_name", "pod_uid") if e.runtime_backend == "kubernetes" else (
            "server_id", "process_namespace", "pid")
        target = {f: getattr(e, f) for f in fields if getattr(e, f) is not None}
    observation = None
    if e.obs_phase is not None:
        observation = Observation(phase=e.obs_phase, reason=e.obs_reason, exit_code=e.obs_exit_code,
                                  terminal=bool(e.obs_terminal), observed_at=e.obs_observed_at)
    return ExecutionPublic(
        execution_id=e.execution_id, seat=e.seat, swarm=e.swarm, role=e.role, labels=e.labels,
        generation=e.generation, previous_execution_id=e.previous_execution_id,
        superseded=e.superseded_by is not None, runtime_backend=e.runtime_backend,
        runtime_target=target, observation=observation, created_at=e.created_at, updated_at=e.updated_at,
    )


def seat_public(seat: Seat, execution: Execution | None) -> SeatPublic:
    current = execution_public(execution) if execution is not None else None
    return SeatPublic(
        seat=seat.name, swarm=seat.swarm, role=seat.role, labels=seat.labels,
        runtime_backend=current.runtime_backend if current else "local",
        runtime_target=current.runtime_target if current else None,
        resume_token=seat.resume_token, last_message_id=seat.last_message_id,
        context_window=seat.context_window, updated_at=seat.updated_at,
        execution_id=current.execution_id if current else None,
        generation=current.generation if current else 0, execution=current,
    )
