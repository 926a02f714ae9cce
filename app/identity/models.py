"""Tables of the identity domain: the seat projection and the execution history."""

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Column, UniqueConstraint
from sqlmodel import Field, SQLModel

from app.db.types import JSONType, UTCDateTime, utcnow


class Seat(SQLModel, table=True):
    """The seat projection: its record, the pointer to its current execution (written only by
    admission) and the orchestrator-owned resume fields (written only by the resume CAS).
    Dropping it loses none of the execution history."""

    __tablename__ = "seats"

    name: str = Field(primary_key=True, max_length=128)
    swarm: str = Field(max_length=128)
    role: str | None = Field(default=None, max_length=128)
    labels: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSONType, nullable=False))
    current_execution_id: uuid.UUID | None = Field(default=None)
    resume_token: str | None = Field(default=None)
    last_message_id: str | None = Field(default=None, max_length=256)
    context_window: int | None = Field(default=None)
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))


class Execution(SQLModel, table=True):
    """One incarnation of a seat. Launcher-owned: written by admission and PATCH only.

    `(seat, generation)` is unique, so two admissions can never share a generation; `pod_uid`
    is unique across every execution ever recorded, so a used Pod UID is never accepted again.
    """

    __tablename__ = "executions"
    __table_args__ = (
        UniqueConstraint("seat", "generation"),
        UniqueConstraint("seat", "idempotency_key"),
    )

    execution_id: uuid.UUID = Field(primary_key=True)
    seat: str = Field(max_length=128, index=True)
    swarm: str = Field(max_length=128)
    role: str | None = Field(default=None, max_length=128)
    labels: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSONType, nullable=False))
    generation: int
    previous_execution_id: uuid.UUID | None = Field(default=None)
    superseded_by: uuid.UUID | None = Field(default=None)
    runtime_backend: str = Field(max_length=16)
    # The runtime target, flattened so that pod_uid can carry a unique index.
    pod_namespace: str | None = Field(default=None, max_length=253)
    pod_name: str | None = Field(default=None, max_length=253)
    pod_uid: str | None = Field(default=None, max_length=128, unique=True)
    server_id: str | None = Field(default=None, max_length=253)
    process_namespace: str | None = Field(default=None, max_length=253)
    pid: int | None = Field(default=None)
    has_target: bool = Field(default=False)
    # The latest runtime observation.
    obs_phase: str | None = Field(default=None, max_length=64)
    obs_reason: str | None = Field(default=None, max_length=256)
    obs_exit_code: int | None = Field(default=None)
    obs_terminal: bool | None = Field(default=None)
    obs_observed_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    idempotency_key: str | None = Field(default=None, max_length=256)
    request_fingerprint: str | None = Field(default=None, max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))
