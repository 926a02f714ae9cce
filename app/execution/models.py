"""The per-epoch attempt record."""

import uuid
from datetime import datetime

from sqlalchemy import Column, ForeignKey, Index, UniqueConstraint
from sqlmodel import Field, SQLModel

from app.db.types import UTCDateTime, utcnow


class TaskAttempt(SQLModel, table=True):
    """One execution attempt of a task instance: (task_instance_id, try_number, attempt_epoch).

    Written at claim, updated when user code starts (`running` acknowledged) and when the
    attempt's single outcome is known."""

    __tablename__ = "task_attempts"
    # ended_at: the dashboard's outcome chart reads the last hour's (history.outcomes_per_minute).
    __table_args__ = (UniqueConstraint("task_instance_id", "try_number", "attempt_epoch"),
                      Index("ix_task_attempts_ended_at", "ended_at"))

    id: uuid.UUID = Field(default_factory=uuid.uuid4, primary_key=True)
    task_instance_id: uuid.UUID = Field(
        sa_column=Column(ForeignKey("task_instances.id", ondelete="CASCADE"), nullable=False, index=True))
    try_number: int
    attempt_epoch: int
    execution_id: uuid.UUID | None = Field(default=None)
    state: str = Field(default="queued", max_length=32)
    outcome_kind: str | None = Field(default=None, max_length=16)  # success | app | infra | rescheduled
    reason: str | None = Field(default=None, max_length=64)
    user_code_started: bool = Field(default=False)
    observed_phase: str | None = Field(default=None, max_length=64)
    observed_reason: str | None = Field(default=None, max_length=256)
    claimed_at: datetime = Field(default_factory=utcnow, sa_column=Column(UTCDateTime, nullable=False))
    started_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
    ended_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
