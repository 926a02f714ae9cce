"""Tables of runs, task instances and their try-level history."""

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Column, ForeignKey, Index, Integer, UniqueConstraint, text
from sqlmodel import Field, SQLModel

from app.db.dialect import partial_index
from app.db.types import JSONType, UTCDateTime, utcnow
from app.orchestration import states

# The states the claim's two partial indexes hold (app/routing/selection.py names them as
# literals, as a query must for a database to use a partial index).
TI_READY_STATE = states.SCHEDULED.value
TI_IN_FLIGHT_STATES = tuple(state.value for state in states.IN_FLIGHT)


def _partial(*states: str) -> dict[str, Any]:
    """A partial index's predicate on both databases: the task instances in `states`."""
    where = text(f"state = '{states[0]}'" if len(states) == 1 else
                 "state IN (" + ", ".join(f"'{state}'" for state in states) + ")")
    return partial_index(where)


def _ts() -> Any:
    """A nullable UTC timestamp column."""
    return Field(default=None, sa_column=Column(UTCDateTime, nullable=True))


class DagRun(SQLModel, table=True):
    __tablename__ = "dag_runs"
    __table_args__ = (
        UniqueConstraint("dag_id", "run_id"), Index("ix_dag_runs_ended_at", "ended_at"),
        # The runs lists' order (oldest or newest first), over every DAG and over one.
        Index("ix_dag_runs_created_at", "created_at", "dag_id", "run_id"),
        Index("ix_dag_runs_dag_id_created_at", "dag_id", "created_at", "run_id"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    dag_id: str = Field(max_length=250)
    run_id: str = Field(max_length=250)
    state: str = Field(default="running", max_length=32)
    tenant_id: str | None = Field(default=None, max_length=250)
    trace_id: str = Field(max_length=64)
    conf: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSONType, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))
    ended_at: datetime | None = _ts()
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))


class TaskInstance(SQLModel, table=True):
    """One task of one run. `attempt_epoch` identifies the current execution attempt: every
    rail that can start a new execution bumps it; it never goes backwards."""

    __tablename__ = "task_instances"
    __table_args__ = (
        UniqueConstraint("dag_id", "run_id", "task_id", "map_index"),
        Index("ix_task_instances_state_next_eligible_at", "state", "next_eligible_at"),
        # The claim's: ready work by group (queue, pool, tenant) in claim order (priority, then
        # age), and the slots in flight per pool. Partial, so that a rail's UPDATE writes to
        # them only when its row enters one of their states.
        Index("ix_task_instances_ready", "queue", "pool", text("coalesce(tenant_id, '')"),
              text("priority_weight DESC"), "updated_at", "id", **_partial(TI_READY_STATE)),
        Index("ix_task_instances_in_flight", "pool", **_partial(*TI_IN_FLIGHT_STATES)),
        # Readiness after a success reads a run's waiting rows (readiness.ready_downstream).
        Index("ix_task_instances_dag_run_id_state", "dag_run_id", "state"),
        # The Airflow list's default order, whole and by its daily filters, ending in the id so
        # that a deep offset walks an index alone (app/db/statements.paginate_by_key).
        Index("ix_task_instances_listing", "map_index", "dag_id", "run_id", "task_id", "id"),
        Index("ix_task_instances_state_listing", "state", "map_index", "dag_id", "run_id", "task_id", "id"),
        Index("ix_task_instances_dag_listing", "dag_id", "map_index", "run_id", "task_id", "id"),
    )

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    dag_run_id: uuid.UUID = Field(
        sa_column=Column(ForeignKey("dag_runs.id", ondelete="CASCADE"), nullable=False, index=True))
    dag_id: str = Field(max_length=250)
    run_id: str = Field(max_length=250)
    task_id: str = Field(max_length=250)
    map_index: int = Field(default=-1)
    payload: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSONType, nullable=False))
    upstream_task_ids: list[str] = Field(default_factory=list, sa_column=Column(JSONType, nullable=False))
    # Whether a task of the run names this one upstream: a success without downstream has no
    # readiness to judge (outcomes.settle_success).
    has_downstream: bool = Field(default=True, sa_column_kwargs={"server_default": text("true")})
    retries: int = Field(default=0)
    retry_delay_seconds: float = Field(default=0)
    max_infra_attempts: int = Field(default=3)
    idempotent: bool = Field(default=True)
    # Routing (app/routing): which claims may take it, what it holds while in flight, its rank.
    queue: str = Field(default="default", max_length=256, sa_column_kwargs={"server_default": "default"})
    pool: str = Field(default="default_pool", max_length=256, sa_column_kwargs={"server_default": "default_pool"})
    pool_slots: int = Field(default=1, sa_column_kwargs={"server_default": "1"})
    priority_weight: int = Field(default=1, sa_column_kwargs={"server_default": "1"})
    tenant_id: str | None = Field(default=None, max_length=250)  # the run's, so the claim need not join runs
    state: str = Field(max_length=32)
    try_number: int = Field(default=1)
    max_tries: int = Field(default=0)
    attempt_epoch: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    infra_attempts: int = Field(default=0)
    last_failure_kind: str | None = Field(default=None, max_length=8)
    last_failure_reason: str | None = Field(default=None, max_length=64)
    execution_id: uuid.UUID | None = Field(default=None, index=True)
    user_code_started: bool = Field(default=False)
    next_eligible_at: datetime | None = _ts()
    last_heartbeat_at: datetime | None = _ts()
    queued_at: datetime | None = _ts()
    started_at: datetime | None = _ts()
    ended_at: datetime | None = _ts()
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))


class TaskInstanceHistory(SQLModel, table=True):
    """One row per finished try, archived once (app/orchestration/outcomes.archiving). Its unique
    key is (task_instance_id, try_number, attempt_epoch) from migration 0013 on, a contract
    migration (it was (task_instance_id, try_number), which older releases' archive statement
    names in its ON CONFLICT): the key of the per-epoch history rows a later release writes."""

    __tablename__ = "task_instance_history"
    __table_args__ = (UniqueConstraint("task_instance_id", "try_number", "attempt_epoch"),)

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    task_instance_id: uuid.UUID = Field(
        sa_column=Column(ForeignKey("task_instances.id", ondelete="CASCADE"), nullable=False, index=True))
    try_number: int
    attempt_epoch: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    state: str = Field(max_length=32)
    infra_attempts: int = Field(default=0)
    last_failure_kind: str | None = Field(default=None, max_length=8)
    last_failure_reason: str | None = Field(default=None, max_length=64)
    execution_id: uuid.UUID | None = Field(default=None)
    queued_at: datetime | None = _ts()
    started_at: datetime | None = _ts()
    ended_at: datetime | None = _ts()


class TaskInstanceCount(SQLModel, table=True):
    """How many task instances a DAG has in a state, mapped or not, as of the last fold
    (app/orchestration/counts.py): with the deltas not yet folded, the exact count."""

    __tablename__ = "task_instance_counts"

    dag_id: str = Field(primary_key=True, max_length=250)
    state: str = Field(primary_key=True, max_length=32)
    mapped: bool = Field(primary_key=True)  # map_index >= 0
    n: int = Field(sa_column=Column(BigInteger, nullable=False))


class TaskInstanceCountDelta(SQLModel, table=True):
    """A change of a count, appended by migration 0015's triggers on task_instances (never by
    the application): writers only insert, so none waits on a counter another one updated."""

    __tablename__ = "task_instance_count_deltas"

    # SQLite numbers only an INTEGER PRIMARY KEY by itself.
    id: int | None = Field(default=None, sa_column=Column(BigInteger().with_variant(Integer(), "sqlite"),
                                                          primary_key=True, autoincrement=True))
    dag_id: str = Field(max_length=250)
    state: str = Field(max_length=32)
    mapped: bool
    delta: int = Field(sa_column=Column(BigInteger, nullable=False))
