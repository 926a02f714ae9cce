"""A try with its epochs: the one place that reads a task instance's tries, the attempt records
of each, and the executions that ran them (for the Airflow routes, the dashboard and the log).

A finished try's try-level fields come from its archived history row, the current try's from
the task instance itself, so no try appears twice.
"""

import uuid
from dataclasses import dataclass

from sqlalchemy import select, tuple_
from sqlmodel import Session

from app.execution.models import TaskAttempt
from app.identity.models import Execution
from app.orchestration import states as s
from app.orchestration.models import TaskInstance, TaskInstanceHistory


@dataclass(frozen=True)
class Try:
    """One try and every attempt epoch it had, oldest first."""

    number: int
    # The try's native state: its archived state once finished (failed when it was spent but
    # never archived), the task instance's own state while it is the current try.
    state: str
    record: TaskInstance | TaskInstanceHistory | None  # where its try-level fields live
    epochs: list[TaskAttempt]
    current: bool


def tries(session: Session, ti: TaskInstance) -> list[Try]:
    """Every try the task instance has a record of, oldest first, the current try last."""
    history = {h.try_number: h for h in session.execute(
        select(TaskInstanceHistory).where(TaskInstanceHistory.task_instance_id == ti.id)).scalars()}
    epochs: dict[int, list[TaskAttempt]] = {}
    for attempt in session.execute(select(TaskAttempt).where(TaskAttempt.task_instance_id == ti.id)
                                   .order_by(TaskAttempt.try_number, TaskAttempt.attempt_epoch)).scalars():
        epochs.setdefault(attempt.try_number, []).append(attempt)
    found = []
    for number in sorted((set(history) | set(epochs)) - {ti.try_number}):
        h = history.get(number)
        found.append(Try(number, h.state if h else s.FAILED, h, epochs.get(number, []), current=False))
    found.append(Try(ti.try_number, ti.state, ti, epochs.get(ti.try_number, []), current=True))
    return found


def current_tries(session: Session, tis: list[TaskInstance]) -> list[Try]:
    """The current try of each task instance, their epochs read by one query for them all."""
    if not tis:
        return []
    epochs: dict[uuid.UUID, list[TaskAttempt]] = {}
    for attempt in session.execute(
            select(TaskAttempt)
            .where(tuple_(TaskAttempt.task_instance_id, TaskAttempt.try_number)
                   .in_([(ti.id, ti.try_number) for ti in tis]))
            .order_by(TaskAttempt.attempt_epoch)).scalars():
        epochs.setdefault(attempt.task_instance_id, []).append(attempt)
    return [Try(ti.try_number, ti.state, ti, epochs.get(ti.id, []), current=True) for ti in tis]


def try_epochs(session: Session, ti: TaskInstance, try_number: int) -> list[TaskAttempt]:
    """The attempt records of one try, in epoch order."""
    return list(session.execute(
        select(TaskAttempt).where(TaskAttempt.task_instance_id == ti.id, TaskAttempt.try_number == try_number)
        .order_by(TaskAttempt.attempt_epoch)
    ).scalars())


def runners(session: Session, epochs: list[TaskAttempt]) -> dict[uuid.UUID, Execution]:
    """The executions that ran `epochs`, by id (one query); an execution the history outlived
    (a partial restore) is simply absent."""
    ids = {e.execution_id for e in epochs if e.execution_id is not None}
    if not ids:
        return {}
    found = session.execute(select(Execution).where(Execution.execution_id.in_(ids))).scalars()
    return {e.execution_id: e for e in found}
