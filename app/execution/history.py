"""A try with its epochs: the one place that reads a task instance's tries, the attempt records
of each, and the executions that ran them (for the Airflow routes, the dashboard and the log);
and the attempt records read across a run, across seats and across time (the dashboard's
timeline, fleet and charts).

A finished try's try-level fields come from its archived history row, the current try's from
the task instance itself, so no try appears twice.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Row,
    Select,
    and_,
    bindparam,
    case,
    cast,
    extract,
    func,
    literal,
    null,
    or_,
    select,
    tuple_,
    union_all,
)
from sqlmodel import Session

from app.execution.models import TaskAttempt
from app.identity.models import Execution
from app.orchestration import states
from app.orchestration.models import TaskInstance, TaskInstanceHistory


@dataclass(frozen=True)
class Try:
    """One try and every attempt epoch it had, oldest first."""

    number: int
    # The try's native state: its archived state once finished (failed when it was spent but
    # never archived), the task instance's own state while it is the current try.
    state: str
    record: TaskInstance | Row | None  # where its try-level fields live: the task instance, or its archive
    epochs: list[TaskAttempt] | list[Row]
    current: bool


HISTORY, ATTEMPTS = TaskInstanceHistory.__table__, TaskAttempt.__table__


def _records() -> Select:
    """The task instance's archived tries and attempt records (`kind` h and a), in one statement
    built once: each row has every column of both, the other table's as NULL (Core rows, with
    the attribute names of the ORM's objects), attempts in (try, epoch) order."""
    columns = {c.name: c.type for table in (HISTORY, ATTEMPTS) for c in table.c if c.name not in ("id",)}

    def rows_of(kind: str, table: Any) -> Select:
        return select(literal(kind).label("kind"), *(
            table.c[name] if name in table.c else cast(null(), kind_of).label(name)
            for name, kind_of in columns.items()))

    mine = bindparam("ti_id")
    both = union_all(rows_of("h", HISTORY).where(HISTORY.c.task_instance_id == mine),
                     rows_of("a", ATTEMPTS).where(ATTEMPTS.c.task_instance_id == mine)).subquery()
    return select(both).order_by(both.c.kind, both.c.try_number, both.c.attempt_epoch)


RECORDS = _records()


def tries(session: Session, ti: TaskInstance | Row) -> list[Try]:
    """Every try the task instance has a record of, oldest first, the current try last."""
    history: dict[int, Row] = {}
    epochs: dict[int, list[Row]] = {}
    for row in session.execute(RECORDS, {"ti_id": ti.id}):
        if row.kind == "h":
            history[row.try_number] = row
        else:
            epochs.setdefault(row.try_number, []).append(row)
    found = []
    for number in sorted((set(history) | set(epochs)) - {ti.try_number}):
        h = history.get(number)
        found.append(Try(number, h.state if h else states.FAILED, h, epochs.get(number, []), current=False))
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


EXECUTIONS = Execution.__table__
# One try's attempt records with the seat and generation of the executions that ran them (an
# execution the history outlived is simply absent), by epoch; built once, with bound values.
TRY_EPOCHS = (select(ATTEMPTS, EXECUTIONS.c.seat, EXECUTIONS.c.generation)
              .select_from(ATTEMPTS.outerjoin(EXECUTIONS, EXECUTIONS.c.execution_id == ATTEMPTS.c.execution_id))
              .where(ATTEMPTS.c.task_instance_id == bindparam("ti_id"), ATTEMPTS.c.try_number == bindparam("try"))
              .order_by(ATTEMPTS.c.attempt_epoch))


def try_epochs(session: Session, ti_id: uuid.UUID, try_number: int, *, statement: Select = TRY_EPOCHS,
               **params: Any) -> list[Row]:
    """The attempt records of try `try_number` of the task instance, by epoch, each with the
    `seat` and `generation` of its execution (None when that execution is gone). One query:
    `statement` may be TRY_EPOCHS with more columns a caller reads on the way (its `params`)."""
    return list(session.execute(statement, {"ti_id": ti_id, "try": try_number, **params}).all())


def runners(session: Session, epochs: list[TaskAttempt]) -> dict[uuid.UUID, Execution]:
    """The executions that ran `epochs`, by id (one query); an execution the history outlived
    (a partial restore) is simply absent."""
    ids = {e.execution_id for e in epochs if e.execution_id is not None}
    if not ids:
        return {}
    found = session.execute(select(Execution).where(Execution.execution_id.in_(ids))).scalars()
    return {e.execution_id: e for e in found}


def run_attempts(session: Session, dag_run_id: uuid.UUID) -> list[TaskAttempt]:
    """Every attempt record of the run's task instances, by task instance, try and epoch."""
    return list(session.execute(
        select(TaskAttempt).join(TaskInstance, TaskInstance.id == TaskAttempt.task_instance_id)
        .where(TaskInstance.dag_run_id == dag_run_id)
        .order_by(TaskAttempt.task_instance_id, TaskAttempt.try_number, TaskAttempt.attempt_epoch)
    ).scalars())


@dataclass(frozen=True)
class SeatActivity:
    """What one seat's executions hold now and did lately."""

    in_flight: int = 0  # task instances queued or running on any of its executions
    on_superseded: int = 0  # of those, held by a superseded execution (the worker-lost reaper re-places them)
    last_heartbeat_at: datetime | None = None  # the latest among them
    claimed: int = 0  # attempts claimed since the moment asked for
    settled: int = 0  # attempts ended by an outcome since then
    infra: int = 0  # of those, ended by an infrastructure fault (re-placed unless the budget was spent)


def seat_activity(session: Session, since: datetime) -> dict[str, SeatActivity]:
    """Each seat's SeatActivity (the attempt counts since `since`), by seat; a seat with
    nothing in flight and no attempt since then is absent. Two grouped queries."""
    held = {seat: (n, stale, beat) for seat, n, stale, beat in session.execute(
        select(Execution.seat, func.count(), func.count(Execution.superseded_by),
               func.max(TaskInstance.last_heartbeat_at))
        .join(Execution, Execution.execution_id == TaskInstance.execution_id)
        .where(TaskInstance.state.in_(states.IN_FLIGHT))
        .group_by(Execution.seat))}
    ended = and_(TaskAttempt.ended_at >= since, TaskAttempt.outcome_kind.is_not(None))
    recent = {seat: (claimed, settled, infra) for seat, claimed, settled, infra in session.execute(
        select(Execution.seat, func.count(case((TaskAttempt.claimed_at >= since, 1))), func.count(case((ended, 1))),
               func.count(case((and_(ended, TaskAttempt.outcome_kind == "infra"), 1))))
        .join(Execution, Execution.execution_id == TaskAttempt.execution_id)
        .where(or_(TaskAttempt.claimed_at >= since, TaskAttempt.ended_at >= since))
        .group_by(Execution.seat))}
    return {seat: SeatActivity(*held.get(seat, (0, 0, None)), *recent.get(seat, (0, 0, 0)))
            for seat in held.keys() | recent.keys()}


def seat_routes(session: Session) -> dict[str, list[tuple[str, str, int]]]:
    """Each seat's task instances in flight by (queue, pool): [(queue, pool, count)], by seat."""
    found: dict[str, list[tuple[str, str, int]]] = {}
    for seat, queue, pool, n in session.execute(
            select(Execution.seat, TaskInstance.queue, TaskInstance.pool, func.count())
            .join(Execution, Execution.execution_id == TaskInstance.execution_id)
            .where(TaskInstance.state.in_(states.IN_FLIGHT))
            .group_by(Execution.seat, TaskInstance.queue, TaskInstance.pool)
            .order_by(Execution.seat, TaskInstance.queue, TaskInstance.pool)):
        found.setdefault(seat, []).append((queue, pool, n))
    return found


def outcomes_per_minute(session: Session, since: datetime, kinds: tuple[str, ...]) -> list[tuple[int, str, int]]:
    """How many attempts ended with each of `kinds` in each whole minute from `since` on:
    (minute, kind, count) rows, minute 0 beginning at `since`. Counted by the database, in
    whole seconds (EXTRACT(EPOCH …) on both databases), so only the counts travel."""
    start = int(since.timestamp())
    ended = (select(((cast(extract("epoch", TaskAttempt.ended_at), BigInteger) - start) // 60).label("minute"),
                    TaskAttempt.outcome_kind.label("kind"))
             .where(TaskAttempt.ended_at >= since, TaskAttempt.outcome_kind.in_(kinds))
             .subquery())
    return [(int(minute), kind, n) for minute, kind, n in session.execute(
        select(ended.c.minute, ended.c.kind, func.count()).group_by(ended.c.minute, ended.c.kind))]
