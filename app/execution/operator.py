"""The operator rails as execution sees them: an attempt they fence off is closed on its record,
so its epoch shows how it ended rather than a run that never finishes."""

import uuid

from sqlmodel import Session

from app.auth.attempt_key import AttemptKey
from app.db.types import utcnow
from app.execution.attempts import update_attempt
from app.orchestration import operator
from app.orchestration import states as s
from app.orchestration.models import TaskInstance
from app.orchestration.runs import run_task_instances
from app.orchestration.states import AttemptState, Rail


def _fenced(ti: TaskInstance) -> AttemptKey | None:
    """The attempt an operator rail is about to fence off, if one is in flight."""
    return AttemptKey.of(ti) if ti.state in s.IN_FLIGHT else None


def clear(*, session: Session, ti: TaskInstance, rail: Rail = s.CLEAR) -> TaskInstance | None:
    """orchestration.operator.clear; an in-flight attempt's record ends as `cleared`."""
    fenced = _fenced(ti)
    cleared = operator.clear(session=session, ti=ti, rail=rail)
    if cleared is not None and fenced:
        update_attempt(session, fenced, state=AttemptState.CLEARED, reason="cleared by an operator",
                       ended_at=utcnow())
    return cleared


def mark(*, session: Session, ti: TaskInstance, state: s.State) -> TaskInstance | None:
    """orchestration.operator.mark; an in-flight attempt's record ends as `marked_success` or `marked_failed`."""
    fenced = _fenced(ti)
    marked = operator.mark(session=session, ti=ti, state=state)
    if marked is not None and fenced:
        update_attempt(session, fenced, state=AttemptState(f"marked_{state}"),
                       reason=f"marked {state} by an operator", ended_at=utcnow())
    return marked


def clear_failed(*, session: Session, dag_run_id: uuid.UUID) -> None:
    """Clear every failed, infra_failed and upstream_failed task instance of the run."""
    for ti in run_task_instances(session=session, dag_run_id=dag_run_id):
        if ti.state in s.CLEAR_FAILED.sources:
            clear(session=session, ti=ti, rail=s.CLEAR_FAILED)
