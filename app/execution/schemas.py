"""Wire schemas of claims, WorkItems, agent writes and observations."""

import uuid
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, model_validator

from app.orchestration.routes import DEFAULT_QUEUE, RouteName
from app.orchestration.schemas import StoredPayload
from app.telemetry.reasons import INFRA_REASONS
from app.web.schemas import Problem, Strict

InfraReason = Literal[INFRA_REASONS]  # type: ignore[valid-type]
REASON_MAX = 64  # an attempt record's reason column


MAX_CLAIM_WAIT_SECONDS = 30


class ClaimRequest(Strict):
    """Up to `limit` ready task instances; with `wait_seconds`, the claim waits up to that long
    for work to become ready (answered as soon as it is) before it answers an empty list (a wait
    of 10 s or more ends on a whole second, up to a second early)."""

    limit: Annotated[int, Field(ge=1, le=100)] = 1
    queues: Annotated[list[RouteName], Field(min_length=1, max_length=50,
                                             description="The queues this claim serves.")] = [DEFAULT_QUEUE]
    wait_seconds: Annotated[float, Field(ge=0, le=MAX_CLAIM_WAIT_SECONDS)] = 0


class Correlation(BaseModel):
    """The opaque correlation bag a worker hands to user code and sends back unchanged."""

    ti_id: uuid.UUID
    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    try_number: int
    attempt_epoch: int
    tenant_id: str | None
    trace_id: str


class WorkItem(BaseModel):
    payload: StoredPayload
    correlation: Correlation
    attempt_token: str


class WorkItems(BaseModel):
    items: list[WorkItem]


class Report(Strict):
    """An agent's report on its attempt. `reason` is required for unexecutable (an infra
    reason), `reschedule_at` for rescheduled."""

    state: Literal["running", "success", "failed", "unexecutable", "rescheduled"]
    reason: Annotated[str, Field(max_length=REASON_MAX)] | None = None
    reschedule_at: datetime | None = None

    @model_validator(mode="after")
    def _complete(self) -> "Report":
        if self.state == "unexecutable" and self.reason not in INFRA_REASONS:
            raise ValueError(f"unexecutable needs reason, one of {', '.join(INFRA_REASONS)}")
        if self.state == "rescheduled":
            if self.reschedule_at is None or self.reschedule_at.tzinfo is None:
                raise ValueError("rescheduled needs reschedule_at with a timezone")
        elif self.reschedule_at is not None:
            raise ValueError("reschedule_at goes only with rescheduled")
        return self


class AttemptStatus(BaseModel):
    """The answer to an accepted agent write: the attempt is still the live one."""

    ti_id: uuid.UUID
    state: str
    try_number: int
    attempt_epoch: int
    should_terminate: bool = False


    @classmethod
    def of(cls, ti: Any) -> "AttemptStatus":
        """The answer for a task instance row the write left live."""
        return cls(ti_id=ti.id, state=ti.state, try_number=ti.try_number, attempt_epoch=ti.attempt_epoch)


class FencePublic(BaseModel):
    """Where a task instance's fence stands now (contract 11.4): `fencing_token` is what its
    live attempt finds as FENCELINE_FENCING_TOKEN, and what a store keeps as the largest it has
    seen; any attempt holding a smaller one is superseded."""

    try_number: int
    attempt_epoch: int
    fencing_token: int
    state: str


class FenceRefusal(Problem):
    """Who may not read a fence: `forbidden` (403) for an attempt token of another task
    instance, `task-instance-not-found` (404) for an operator asking after none."""

    STATUSES: ClassVar[tuple[int, ...]] = (403, 404)
    type: Literal["forbidden", "task-instance-not-found"]


class RenewedToken(BaseModel):
    attempt_token: str


class ObservationIn(Strict):
    """A substrate observation of one attempt. `outcome`, when the observer has decided one,
    settles the attempt through the same fence as an agent report; a phase alone never does."""

    ti_id: uuid.UUID
    try_number: Annotated[int, Field(ge=0)]
    attempt_epoch: Annotated[int, Field(ge=0)]
    phase: Annotated[str, Field(min_length=1, max_length=64)]
    reason: Annotated[str, Field(max_length=256)] | None = None
    outcome: Literal["success", "failed", "unexecutable"] | None = None

    @model_validator(mode="after")
    def _outcome_reason(self) -> "ObservationIn":
        if self.outcome == "unexecutable" and self.reason not in INFRA_REASONS:
            raise ValueError(f"an unexecutable outcome needs reason, one of {', '.join(INFRA_REASONS)}")
        if self.outcome is not None and self.reason is not None and len(self.reason) > REASON_MAX:
            raise ValueError(f"an outcome's reason has at most {REASON_MAX} characters")
        return self


class ObservationResult(BaseModel):
    recorded: bool
    settled: bool
    state: str


class AttemptPublic(BaseModel):
    try_number: int
    attempt_epoch: int
    execution_id: uuid.UUID | None
    state: str
    outcome_kind: Literal["success", "app", "infra", "rescheduled"] | None
    reason: str | None
    user_code_started: bool
    observed_phase: str | None
    observed_reason: str | None
    claimed_at: datetime
    started_at: datetime | None
    ended_at: datetime | None


class AttemptsPublic(BaseModel):
    items: list[AttemptPublic]


class SweepResult(BaseModel):
    marked: dict[str, int]
    swept: bool


class StaleReport(Problem):
    """An agent write the fence refused. `should_terminate` tells the worker whether to kill its
    task: true for `stale-report` (409: the attempt was superseded or has ended; `state`,
    `try_number` and `attempt_epoch` are the task instance's now) and `task-instance-not-found`
    (404), false for `attempt-started` (409: a release of an attempt whose user code started)."""

    STATUSES: ClassVar[tuple[int, ...]] = (404, 409)
    type: Literal["stale-report", "task-instance-not-found", "attempt-started"]
    should_terminate: bool
    state: str | None = None
    try_number: int | None = None
    attempt_epoch: int | None = None


class RailRefusal(Problem):
    """409: an operator rail that changed nothing. `task-instance-moved`: the task instance
    changed while the request ran (read it and retry); `task-instance-not-in-flight`: re-place
    found no attempt in flight (`state` is the task instance's); `run-finished`: cancel found
    nothing of the run unfinished (`state` is the run's)."""

    STATUSES: ClassVar[tuple[int, ...]] = (409,)
    type: Literal["task-instance-moved", "task-instance-not-in-flight", "run-finished"]
    state: str | None = None


class StaleExecution(Problem):
    """409: the claiming execution was superseded or observed terminal: it claims nothing more."""

    STATUSES: ClassVar[tuple[int, ...]] = (409,)
    type: Literal["stale-execution"]
    should_terminate: bool


# --- batches (contract 2.11) ---------------------------------------------------------------------
MAX_BATCH_ENTRIES = 500


class BatchEntry(BaseModel):
    """One entry of a batch: `attempt_token`, `op`, and the fields of the single request's body.

    The attempt token is the attempt's own, checked as its single request's bearer would be. A
    `heartbeat` carries no other field. A `report` carries those of POST /v1/attempts/report
    (`state`, `reason`, `reschedule_at`), and a `log` those of POST /v1/attempts/logs (`offset`,
    `content`). An entry that breaks these rules is answered 422 on its own, and the others go on.

    `traceparent`, optional, is what the single request's W3C header would carry. With tracing
    on, the entry's span is a child of it, in its run's trace; an invalid one is ignored, as the
    header is."""

    model_config = {"extra": "allow"}
    attempt_token: str
    op: Literal["heartbeat", "report", "log"]
    traceparent: str | None = None


class BatchRequest(BaseModel):
    """Up to 500 entries, answered in order (more: 413, the whole batch refused)."""

    # Each entry is read on its own (app/execution/batch.py): one malformed entry is that
    # entry's 422, not the batch's. BatchEntry documents what an entry holds. Not Strict: an
    # entry's text is held to its own request's rules (a log's content may carry NUL), so a NUL
    # in one entry is that entry's answer, never the whole batch's 422.
    model_config = {"extra": "forbid"}
    entries: list[dict[str, Any]] = Field(json_schema_extra={"items": {"$ref": "#/components/schemas/BatchEntry"}})


class BatchResult(BaseModel):
    """What the entry's single request would have answered: its status and its body (an
    AttemptStatus, a LogAppended `{size}` or a problem document with its `should_terminate`)."""

    status: int
    body: dict[str, Any]


class BatchResults(BaseModel):
    results: list[BatchResult]
