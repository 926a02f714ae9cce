"""The guarded compare-and-swap every rail is built from, and the run's lock.

Each statement of a rail carries the rail's source states as a guard (from_sources) and sets
its target, and a rail that can start a new execution (retry, clear, clear-all-failed, infra
re-place, reschedule re-dispatch, requeue, the claim in execution/dispatch.py) bumps
`attempt_epoch` and clears `last_heartbeat_at` in the same statement (moved_to), so nothing a
superseded attempt does can settle, heartbeat for, or outlive its replacement. `cas` also
guards on `(id, state, try_number, attempt_epoch)` as read from the candidate: `None` means the
row moved and the caller lost the race. Every path that settles, clears or marks a task
instance locks the run's row first (lock_run): one lock order, so they never deadlock.
"""

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, bindparam, select, update
from sqlmodel import Session

from app.db.statements import one_of
from app.db.types import utcnow
from app.orchestration import states as s
from app.orchestration.events import announce_room
from app.orchestration.models import DagRun, TaskInstance, TaskInstanceHistory
from app.orchestration.states import Rail

# The tables, for the statements of the hot paths: plain Core, without the ORM's per-statement
# bookkeeping (identity map, bulk-update evaluation), which those paths do not need.
TI, RUNS, HISTORY = TaskInstance.__table__, DagRun.__table__, TaskInstanceHistory.__table__

# What a new execution attempt starts without: the previous one's worker and start.
NEW_EXECUTION = {"execution_id": None, "user_code_started": False, "started_at": None}
# What a cleared try, or one marked success, shows of failures: none (the archived tries and
# the attempt records keep the history).
NO_FAILURE = {"last_failure_kind": None, "last_failure_reason": None}


def from_sources(rail: Rail) -> ColumnElement[bool]:
    """The guard every statement of `rail` carries: the row is in one of its source states."""
    return one_of(TI.c.state, sorted(rail.sources))  # a set: sorted, so every process writes the same statement


def moved_to(rail: Rail, now: datetime) -> dict[str, Any]:
    """What every statement of `rail` sets: its target state and, for a rail that starts a new
    execution attempt, a new epoch without the old one's heartbeat."""
    values: dict[str, Any] = {"state": rail.target, "updated_at": now}
    if rail.new_epoch:
        values.update(attempt_epoch=TI.c.attempt_epoch + 1, last_heartbeat_at=None)
    return values


def cas(session: Session, ti: TaskInstance, rail: Rail, now: datetime | None = None, *,
        within: Rail | None = None, **values: Any) -> TaskInstance | None:
    """Move `ti` along `rail` from the state, try and epoch it was read with; None if it moved
    since, or if that state is not one of the rail's sources (nor of `within`'s, when given).
    A move out of queued or running announces the pool slot and tenant place it frees."""
    guards = [from_sources(rail)] if within is None else [from_sources(rail), from_sources(within)]
    moved = session.execute(
        update(TaskInstance)
        .where(
            TaskInstance.id == ti.id,
            TaskInstance.state == ti.state,
            TaskInstance.try_number == ti.try_number,
            TaskInstance.attempt_epoch == ti.attempt_epoch,
            *guards,
        )
        .values(**moved_to(rail, now or utcnow()), **values)
        .returning(TaskInstance)
        .execution_options(populate_existing=True, synchronize_session=False)
    ).scalar_one_or_none()
    if moved is not None and ti.state in s.IN_FLIGHT and rail.target not in s.IN_FLIGHT:
        announce_room(session)
    return moved


def lock_run(session: Session, dag_run_id: uuid.UUID) -> None:
    """Lock the run's row. Every path that settles, clears or marks a task instance takes it
    before the task instance's row: one lock order, so those paths queue on the run and never
    deadlock, also against a reaper sweep that holds a run across several marks."""
    session.execute(select(RUNS.c.id).where(RUNS.c.id == dag_run_id).with_for_update()).scalar_one()


LOCK_RUN_OF = (select(RUNS.c.id).where(RUNS.c.id == select(TI.c.dag_run_id).where(TI.c.id == bindparam("ti_id"))
                                       .scalar_subquery()).with_for_update())


def lock_run_of(session: Session, ti_id: uuid.UUID) -> bool:
    """Lock the run of task instance `ti_id` (lock_run) without reading the task instance
    first; False if there is no such task instance."""
    return session.execute(LOCK_RUN_OF, {"ti_id": ti_id}).first() is not None
