"""The guarded compare-and-swap every rail is built from, and the run's lock.

Each statement of a rail carries the rail's source states as a guard (from_sources) and sets
its target, and a rail that can start a new execution (retry, clear, clear-all-failed, infra
re-place, reschedule re-dispatch, requeue, the claim in execution/dispatch.py) bumps
`attempt_epoch` and clears `last_heartbeat_at` in the same statement (moved_to), so nothing a
superseded attempt does can settle, heartbeat for, or outlive its replacement. `cas` also
guards on `(id, state, try_number, attempt_epoch)` as read from the candidate: `None` means the
row moved and the caller lost the race. Every path that settles, clears or marks a task
instance locks the run's row first (lock_run, or lock_runs for several): one lock order
(docs/decisions/0013-one-lock-order.md), so they never deadlock.
"""

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, bindparam, select, update
from sqlmodel import Session

from app.db.dialect import dialect_of
from app.db.statements import one_of
from app.db.types import utcnow
from app.orchestration import states
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
    if moved is not None and ti.state in states.IN_FLIGHT and rail.target not in states.IN_FLIGHT:
        announce_room(session)
    return moved


def read_task_instance(session: Session, ti_id: uuid.UUID) -> TaskInstance | None:
    """The task instance as the database holds it now (not as the session last saw it), the
    state a rail's compare-and-swap then guards on."""
    return session.execute(
        select(TaskInstance).where(TaskInstance.id == ti_id).execution_options(populate_existing=True)
    ).scalar_one_or_none()


# The run's lock is FOR NO KEY UPDATE, not FOR UPDATE: it queues every holder of it one after the
# other just the same, but not the FOR KEY SHARE lock that PostgreSQL's foreign-key check takes
# on the run when a transaction writes a task instance (or its history, or its attempt record)
# a second time. With FOR UPDATE, a claim that had moved a task instance waited there on a
# run's holder that waited on that task instance: a deadlock.
RUN_LOCK = {"key_share": True}
LOCK_RUN = select(RUNS.c.id).where(RUNS.c.id == bindparam("run")).with_for_update(**RUN_LOCK)
LOCK_RUN_OF = (select(RUNS.c.id).where(RUNS.c.id == select(TI.c.dag_run_id).where(TI.c.id == bindparam("ti_id"))
                                       .scalar_subquery()).with_for_update(**RUN_LOCK))
# Several runs, in key order (PostgreSQL sorts before it locks): the order every path takes them.
LOCK_RUNS = select(RUNS.c.id).where(RUNS.c.id.in_(bindparam("runs", expanding=True))).order_by(RUNS.c.id)
LOCK_RUNS_OF = select(RUNS.c.id).where(RUNS.c.id.in_(select(TI.c.dag_run_id).where(
    TI.c.id.in_(bindparam("ids", expanding=True))))).order_by(RUNS.c.id)


def lock_run(session: Session, dag_run_id: uuid.UUID) -> None:
    """Lock the run's row. Every path that settles, clears or marks a task instance takes it
    before the task instance's row: one lock order, so those paths queue on the run and never
    deadlock."""
    session.execute(LOCK_RUN, {"run": dag_run_id}).scalar_one()


def lock_run_of(session: Session, ti_id: uuid.UUID) -> bool:
    """Lock the run of task instance `ti_id` (lock_run) without reading the task instance
    first; False if there is no such task instance."""
    return session.execute(LOCK_RUN_OF, {"ti_id": ti_id}).first() is not None


def lock_runs(session: Session, dag_run_ids: Iterable[uuid.UUID] = (), *,
              of: Iterable[uuid.UUID] = ()) -> None:
    """Lock the runs `dag_run_ids`, or those of the task instances `of`, in key order, before any
    task instance's row: a path that settles or marks task instances of several runs (a batch
    of reports, a sweep) takes them all first, so it never waits on a run while it holds a task
    instance, nor takes two runs in another order than a path like it. (SQLite's writers take
    turns: nothing to lock.)"""
    dialect = dialect_of(session)
    if dialect.writers_take_turns:
        return
    runs, ids = list(dag_run_ids), list(of)
    if runs:
        session.execute(dialect.for_update(LOCK_RUNS, **RUN_LOCK), {"runs": runs}).all()
    if ids:
        session.execute(dialect.for_update(LOCK_RUNS_OF, **RUN_LOCK), {"ids": ids}).all()
