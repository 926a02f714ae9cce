"""The operator rails: clear, mark and cancel, an operator's word on a task instance, whatever it is doing.

Each takes the run's lock first (the lock order of every settling path) and fences off any
attempt in flight with a new epoch; a cleared task instance starts a new try (with readiness
judged again for the run, its upstream_failed downstream waiting again), a marked one ends its
try with the operator's verdict, and a cancelled run's task instances end failed or skipped.
Re-place now is an outcome (unexecutable) and takes outcomes.apply_outcome. What execution does
for the fenced-off attempt's record is in app/execution/operator.py.
"""

from datetime import datetime

from sqlmodel import Session

from app.db.types import utcnow
from app.orchestration import states
from app.orchestration.cas import NEW_EXECUTION, NO_FAILURE, cas, lock_run
from app.orchestration.models import TaskInstance
from app.orchestration.outcomes import InfraBackoff, Outcome, apply_outcome, archive_try, settled
from app.orchestration.readiness import refresh_run
from app.orchestration.states import Rail


def clear(*, session: Session, ti: TaskInstance, rail: Rail = states.CLEAR,
          now: datetime | None = None) -> TaskInstance | None:
    """Any started or finished state -> a new try (scheduled, or none while upstreams are not
    done), new epoch, fresh infra budget, and `retries` more tries after it (Airflow's
    max_tries = try_number + retries, counted from the last try that ran). A try that never
    ran (upstream_failed) is reused. In-flight attempts are fenced off. A task instance the
    rail does not apply to (one that has not started) is answered unchanged."""
    now = now or utcnow()
    if ti.state not in rail.sources:
        return ti
    lock_run(session, ti.dag_run_id)
    if ti.state in states.IN_FLIGHT or ti.state == states.UP_FOR_RESCHEDULE:
        archive_try(session, ti, states.FAILED)
    next_try = ti.try_number if ti.state == states.UPSTREAM_FAILED else ti.try_number + 1
    cleared = cas(
        session, ti, rail, now, try_number=next_try, max_tries=next_try - 1 + ti.retries,
        infra_attempts=0, next_eligible_at=None, queued_at=None, ended_at=None, **NO_FAILURE, **NEW_EXECUTION,
    )
    if cleared is None:
        return None
    refresh_run(session, cleared.dag_run_id, now, reopen=True)
    return session.get(TaskInstance, cleared.id, populate_existing=True)  # readiness may have scheduled it


def mark_state(*, session: Session, ti: TaskInstance, state: states.State,
               now: datetime | None = None) -> TaskInstance | None:
    """An operator's verdict: -> success or failed, new epoch (any in-flight worker is told to
    terminate), try archived. Success shows no failure; failed records an application failure
    with reason `marked_failed`."""
    now = now or utcnow()
    if ti.state == state:
        return ti
    lock_run(session, ti.dag_run_id)
    if state == states.SUCCESS:
        rail, failure = states.MARK_SUCCESS, NO_FAILURE
    else:
        rail, failure = states.MARK_FAILED, {"last_failure_kind": "app", "last_failure_reason": "marked_failed"}
    marked = cas(session, ti, rail, now, ended_at=now, next_eligible_at=None, **failure)
    return settled(session, marked, state, now)


CANCELLED = {"last_failure_kind": "app", "last_failure_reason": "cancelled"}


def cancel(*, session: Session, ti: TaskInstance, now: datetime | None = None) -> TaskInstance | None:
    """An in-flight task instance of a run being cancelled -> failed with reason `cancelled`,
    new epoch (its worker is told to terminate), try archived. The caller holds the run's lock.
    None if it moved meanwhile (a start takes no run lock: read it again and retry)."""
    now = now or utcnow()
    moved = cas(session, ti, states.CANCEL, now, ended_at=now, next_eligible_at=None, **CANCELLED)
    if moved is not None:
        archive_try(session, moved, states.FAILED)
    return moved


def skip(*, session: Session, ti: TaskInstance, now: datetime | None = None) -> TaskInstance | None:
    """A task instance of a run being cancelled that has nothing in flight (waiting, scheduled,
    up for retry or reschedule) -> skipped; a try a reschedule left under way is archived. The
    caller holds the run's lock. None if it moved meanwhile (a claim takes no run lock)."""
    now = now or utcnow()
    under_way = ti.state == states.UP_FOR_RESCHEDULE
    moved = cas(session, ti, states.SKIP, now, ended_at=now, next_eligible_at=None)
    if moved is not None and under_way:
        archive_try(session, moved, states.SKIPPED)
    return moved


REPLACED = Outcome("unexecutable", "operator_replaced")
AT_ONCE = InfraBackoff(0, 0)  # re-place *now*: no back-off


def replace(*, session: Session, ti: TaskInstance, now: datetime | None = None) -> TaskInstance | None:
    """Re-place now, an in-flight task instance routed as unexecutable (reason
    operator_replaced): scheduled again at once on the same try and a new epoch, one re-place
    of the infra budget spent, or infra_failed when it is spent (or user code of a
    non-idempotent task started). The caller holds the run's lock. None if it moved meanwhile."""
    return apply_outcome(session=session, ti=ti, outcome=REPLACED, backoff=AT_ONCE, now=now, within=states.REPLACE,
                         locked=True)
