"""The per-epoch attempt record: opened at claim, closed by the attempt's one outcome."""

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlmodel import Session

from app.db import utcnow
from app.execution.models import TaskAttempt
from app.orchestration.models import TaskInstance
from app.orchestration.rails import Outcome

OUTCOME_KIND = {"success": "success", "failed": "app", "unexecutable": "infra", "rescheduled": "rescheduled"}


def open_attempt(session: Session, ti: TaskInstance, now: datetime) -> None:
    session.add(TaskAttempt(task_instance_id=ti.id, try_number=ti.try_number, attempt_epoch=ti.attempt_epoch,
                            execution_id=ti.execution_id, state=ti.state, claimed_at=now))


def update_attempt(session: Session, ti_id: uuid.UUID, try_number: int, epoch: int, **values: Any) -> None:
    """Update the record of (ti, try, epoch); an attempt dispatched before the fence existed
    has none, so one is made."""
    updated = session.execute(
        update(TaskAttempt)
        .where(TaskAttempt.task_instance_id == ti_id, TaskAttempt.try_number == try_number,
               TaskAttempt.attempt_epoch == epoch)
        .values(**values)
        .execution_options(synchronize_session=False)
    ).rowcount
    if not updated:
        session.add(TaskAttempt(task_instance_id=ti_id, try_number=try_number, attempt_epoch=epoch,
                                claimed_at=values.get("started_at") or values.get("ended_at") or utcnow(), **values))
        session.flush()


def close_attempt(session: Session, ti_id: uuid.UUID, try_number: int, epoch: int, outcome: Outcome,
                  now: datetime) -> None:
    update_attempt(session, ti_id, try_number, epoch, state=outcome.kind, outcome_kind=OUTCOME_KIND[outcome.kind],
                   reason=outcome.reason, ended_at=now)


def find_attempt(session: Session, ti_id: uuid.UUID, try_number: int, epoch: int) -> TaskAttempt | None:
    return session.execute(
        select(TaskAttempt).where(TaskAttempt.task_instance_id == ti_id, TaskAttempt.try_number == try_number,
                                  TaskAttempt.attempt_epoch == epoch)
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()


def list_attempts(*, session: Session, ti_id: uuid.UUID) -> list[TaskAttempt]:
    return list(session.execute(
        select(TaskAttempt).where(TaskAttempt.task_instance_id == ti_id)
        .order_by(TaskAttempt.try_number, TaskAttempt.attempt_epoch)
    ).scalars())
