"""The operator rails as execution sees them: an attempt they fence off is closed on its record,
so its epoch shows how it ended rather than a run that never finishes."""

import uuid
from datetime import datetime

from sqlmodel import Session

from app.auth.attempt_key import AttemptKey
from app.db.types import utcnow
from app.errors import AppError, conflict
from app.execution.attempts import CANCELLED, CLEARED, MARKED, close_attempt
from app.orchestration import operator, states
from app.orchestration.cas import lock_run
from app.orchestration.models import DagRun, TaskInstance
from app.orchestration.readiness import settle_run
from app.orchestration.runs import run_task_instances
from app.orchestration.states import Rail
from app.routing import selection

# A claim (scheduled -> queued) and a start (queued -> running) take no run lock, so a rail
# under the run's lock may lose its row to them; each moves a row forward once, so a rail read
# again wins within a few tries.
TRIES = 4


def _fenced(ti: TaskInstance) -> AttemptKey | None:
    """The attempt an operator rail is about to fence off, if one is in flight."""
    return AttemptKey.of(ti) if ti.state in states.IN_FLIGHT else None


def clear(*, session: Session, ti: TaskInstance, rail: Rail = states.CLEAR) -> TaskInstance | None:
    """orchestration.operator.clear, ending an in-flight attempt's record as `cleared`."""
    fenced = _fenced(ti)
    cleared = operator.clear(session=session, ti=ti, rail=rail)
    if cleared is not None and fenced:
        close_attempt(session, fenced, CLEARED, utcnow())
    return cleared


def mark_state(*, session: Session, ti: TaskInstance, state: states.State) -> TaskInstance | None:
    """orchestration.operator.mark_state; an in-flight attempt's record ends as `marked_success` or `marked_failed`."""
    fenced = _fenced(ti)
    marked = operator.mark_state(session=session, ti=ti, state=state)
    if marked is not None and fenced:
        close_attempt(session, fenced, MARKED[state], utcnow())
    return marked


def moved() -> AppError:
    return conflict("task-instance-moved", "Task instance moved",
                    "The task instance changed while the request ran; read it and retry.")


def require_moved(ti: TaskInstance | None) -> TaskInstance:
    """What a rail moved; 409 task-instance-moved when the row moved first (the rail's None)."""
    if ti is None:
        raise moved()
    return ti


def cancel(*, session: Session, run: DagRun) -> None:
    """Cancel the run: every in-flight task instance ends failed (its attempt's record
    `cancelled`, the worker told to terminate at its next call), every one not started ends
    skipped, and the run ends (failed). 409 run-finished if nothing of it is unfinished.

    Lock order: the run, then what no claim touches, then the pools of the ready ones (as a
    claim locks them) and only then the ready ones, so a claim that holds a pool and is taking
    some of them never waits on a row this holds, nor this on one it holds."""
    now = utcnow()
    lock_run(session, run.id)
    tis = [ti for ti in run_task_instances(session=session, dag_run_id=run.id) if ti.state not in states.FINISHED]
    if not tis:
        session.refresh(run)
        raise conflict("run-finished", "Run finished", f"Run {run.run_id!r} of DAG {run.dag_id!r} has ended "
                       f"({run.state}): nothing to cancel.", state=run.state)
    ready = [ti for ti in tis if not _end(session, ti, now, ready_too=False)]
    if ready:
        selection.lock_pools(session, (ti.pool for ti in ready))
        for ti in ready:
            _end(session, ti, now, ready_too=True)
    settle_run(session, run.id, now)


def _end(session: Session, ti: TaskInstance, now: datetime, *, ready_too: bool) -> bool:
    """Cancel or skip `ti` (read again while a claim or a start moves it first); False, having
    done nothing, for a ready one (scheduled) unless `ready_too`."""
    for _ in range(TRIES):
        if ti.state == states.SCHEDULED and not ready_too:
            return False
        fenced = _fenced(ti)
        if (operator.cancel if fenced else operator.skip)(session=session, ti=ti, now=now) is not None:
            if fenced:
                close_attempt(session, fenced, CANCELLED, now)
            return True
        ti = session.get(TaskInstance, ti.id, populate_existing=True)
    raise moved()


def replace(*, session: Session, ti: TaskInstance, now: datetime | None = None) -> TaskInstance:
    """Re-place now: the attempt in flight ends `unexecutable` (reason operator_replaced, its
    worker told to terminate) and the task instance is scheduled again at once on the same try,
    spending one re-place of its infra budget. With the budget spent, or for a non-idempotent
    task whose user code started, it ends infra_failed instead (contract 2.4, 2.9). 409
    task-instance-not-in-flight if no attempt is in flight."""
    now = now or utcnow()
    lock_run(session, ti.dag_run_id)
    session.refresh(ti)
    if ti.state not in states.IN_FLIGHT:
        raise conflict("task-instance-not-in-flight", "Task instance not in flight",
                       f"Task instance {ti.id} is {ti.state}: no attempt is in flight to re-place.", state=ti.state)

    for _ in range(TRIES):
        fenced = AttemptKey.of(ti)
        replaced = operator.replace(session=session, ti=ti, now=now)
        if replaced is not None:
            close_attempt(session, fenced, operator.REPLACED, now)
            return replaced
        session.refresh(ti)  # a start (queued -> running) takes no run lock
    raise moved()


def clear_failed(*, session: Session, dag_run_id: uuid.UUID) -> None:
    """Clear every failed, infra_failed, upstream_failed and skipped task instance of the run
    (so clearing a cancelled run's failed tasks resumes it)."""
    for ti in run_task_instances(session=session, dag_run_id=dag_run_id):
        if ti.state in states.CLEAR_FAILED.sources:
            clear(session=session, ti=ti, rail=states.CLEAR_FAILED)
