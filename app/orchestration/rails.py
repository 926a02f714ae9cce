"""The named rails: every transition a task instance can make, each one compare-and-swap.

Every rail that can start a new execution (retry, clear, clear-all-failed, infra re-place,
reschedule re-dispatch, requeue; the claim lives in execution/dispatch.py) bumps
`attempt_epoch` and clears `last_heartbeat_at` in the same statement, so nothing a superseded
attempt does can settle, heartbeat for, or outlive its replacement.

Each CAS is guarded on `(id, state, try_number, attempt_epoch)` as read from the candidate:
`None` means the row moved and the caller lost the race.
"""

import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import select, update
from sqlmodel import Session

from app.db import insert_ignore, utcnow
from app.orchestration import states as s
from app.orchestration.models import TaskInstance, TaskInstanceHistory
from app.orchestration.runs import lock_run, refresh_run


@dataclass(frozen=True)
class Outcome:
    """The single outcome of one attempt, as execution hands it over."""

    kind: Literal["success", "failed", "unexecutable", "rescheduled"]
    reason: str | None = None
    reschedule_at: datetime | None = None


@dataclass(frozen=True)
class Backoff:
    """Exponential back-off for infra re-places: min(cap, base * 2**n), with equal jitter."""

    base_seconds: float = 5.0
    cap_seconds: float = 300.0

    @classmethod
    def from_settings(cls, settings: Any) -> "Backoff":
        return cls(settings.infra_backoff_base_seconds, settings.infra_backoff_cap_seconds)

    def delay(self, infra_attempts: int) -> timedelta:
        ceiling = min(self.cap_seconds, self.base_seconds * 2 ** infra_attempts)
        return timedelta(seconds=ceiling * random.uniform(0.5, 1.0))


# What a new execution attempt starts without: the previous one's heartbeat, worker and start.
NEW_EXECUTION = {"last_heartbeat_at": None, "execution_id": None, "user_code_started": False, "started_at": None}


def cas(session: Session, ti: TaskInstance, **values: Any) -> TaskInstance | None:
    """Move `ti` from the state, try and epoch it was read with; None if it moved since."""
    return session.execute(
        update(TaskInstance)
        .where(
            TaskInstance.id == ti.id,
            TaskInstance.state == ti.state,
            TaskInstance.try_number == ti.try_number,
            TaskInstance.attempt_epoch == ti.attempt_epoch,
        )
        .values(**values, updated_at=utcnow())
        .returning(TaskInstance)
        .execution_options(populate_existing=True, synchronize_session=False)
    ).scalar_one_or_none()


def archive_try(session: Session, ti: TaskInstance, state: str) -> None:
    """Record a finished try once; a second archive of the same try does nothing."""
    insert_ignore(session, TaskInstanceHistory, {
        "id": uuid.uuid4(), "task_instance_id": ti.id, "try_number": ti.try_number,
        "attempt_epoch": ti.attempt_epoch, "state": state, "infra_attempts": ti.infra_attempts,
        "last_failure_kind": ti.last_failure_kind, "last_failure_reason": ti.last_failure_reason,
        "execution_id": ti.execution_id, "queued_at": ti.queued_at, "started_at": ti.started_at,
        "ended_at": ti.ended_at,
    }, ["task_instance_id", "try_number"])


def _settled(session: Session, ti: TaskInstance | None, archived_state: str | None, now: datetime) -> TaskInstance | None:
    if ti is not None:
        if archived_state is not None:
            archive_try(session, ti, archived_state)
        if ti.state in s.FINISHED:
            refresh_run(session, ti.dag_run_id, now)
    return ti


def apply_outcome(
    *, session: Session, ti: TaskInstance, outcome: Outcome, backoff: Backoff, now: datetime | None = None
) -> TaskInstance | None:
    """Route one attempt's outcome from the state `ti` was read in.

    success ends the try; failed (application) spends it: up_for_retry while try_number <=
    max_tries, else failed; unexecutable (infra) re-places the same try on the back-off budget
    and ends in infra_failed when the budget is spent, or at once for a non-idempotent task
    whose user code started; rescheduled waits for reschedule_at on the same try.
    None if the attempt was superseded meanwhile.
    """
    now = now or utcnow()
    lock_run(session, ti.dag_run_id)
    if outcome.kind == "success":
        return _settled(session, cas(session, ti, state=s.SUCCESS, ended_at=now), s.SUCCESS, now)
    if outcome.kind == "failed":
        failure = {"last_failure_kind": "app", "last_failure_reason": outcome.reason, "ended_at": now}
        if ti.try_number <= ti.max_tries:
            retry_at = now + timedelta(seconds=ti.retry_delay_seconds)
            return _settled(session, cas(session, ti, state=s.UP_FOR_RETRY, next_eligible_at=retry_at, **failure),
                            s.FAILED, now)
        return _settled(session, cas(session, ti, state=s.FAILED, **failure), s.FAILED, now)
    if outcome.kind == "unexecutable":
        failure = {"last_failure_kind": "infra", "last_failure_reason": outcome.reason}
        started_non_idempotent = not ti.idempotent and ti.user_code_started
        if started_non_idempotent or ti.infra_attempts >= ti.max_infra_attempts:
            return _settled(session, cas(session, ti, state=s.INFRA_FAILED, ended_at=now, **failure),
                            s.INFRA_FAILED, now)
        return replace_after_infra_fault(session=session, ti=ti, backoff=backoff, now=now, **failure)
    return cas(session, ti, state=s.UP_FOR_RESCHEDULE, next_eligible_at=outcome.reschedule_at, last_heartbeat_at=None)


def replace_after_infra_fault(
    *, session: Session, ti: TaskInstance, backoff: Backoff, now: datetime, **failure: Any
) -> TaskInstance | None:
    """in flight -> scheduled after back-off, same try, infra_attempts + 1, new epoch."""
    return cas(
        session, ti, state=s.SCHEDULED, attempt_epoch=ti.attempt_epoch + 1, infra_attempts=ti.infra_attempts + 1,
        next_eligible_at=now + backoff.delay(ti.infra_attempts), **NEW_EXECUTION, **failure,
    )


def requeue(*, session: Session, ti: TaskInstance) -> TaskInstance | None:
    """queued -> scheduled, same try, new epoch, no infra budget spent: a worker hands back a
    claim whose user code never started."""
    if ti.state != s.QUEUED:
        return None
    return cas(session, ti, state=s.SCHEDULED, attempt_epoch=ti.attempt_epoch + 1, next_eligible_at=None,
               **NEW_EXECUTION)


def promote_eligible(*, session: Session, now: datetime, skip_locked: bool) -> None:
    """The time-driven rails, for every row whose wait is over:
    reset_for_retry (up_for_retry -> scheduled, next try) and redispatch_after_reschedule
    (up_for_reschedule -> scheduled, same try). Both bump the epoch. Rows another
    transaction holds are skipped, not waited for."""
    for state, extra in (
        (s.UP_FOR_RETRY, {"try_number": TaskInstance.try_number + 1, "infra_attempts": 0,
                          "ended_at": None, "queued_at": None}),
        (s.UP_FOR_RESCHEDULE, {}),
    ):
        due = select(TaskInstance.id).where(TaskInstance.state == state, TaskInstance.next_eligible_at <= now)
        if skip_locked:
            due = due.with_for_update(skip_locked=True)
        session.execute(
            update(TaskInstance)
            .where(TaskInstance.id.in_(due), TaskInstance.state == state)
            .values(state=s.SCHEDULED, attempt_epoch=TaskInstance.attempt_epoch + 1, next_eligible_at=None,
                    updated_at=now, **NEW_EXECUTION, **extra)
            .execution_options(synchronize_session=False)
        )


def clear(*, session: Session, ti: TaskInstance, now: datetime | None = None) -> TaskInstance | None:
    """Any started or finished state -> a new try (scheduled, or none while upstreams are not
    done), new epoch, fresh infra budget, and `retries` more tries after it (Airflow's
    max_tries = try_number + retries, counted from the last try that ran). A try that never
    ran (upstream_failed) is reused. In-flight attempts are fenced off."""
    now = now or utcnow()
    if ti.state not in s.CLEARABLE:
        return ti
    lock_run(session, ti.dag_run_id)
    if ti.state in s.IN_FLIGHT or ti.state == s.UP_FOR_RESCHEDULE:
        archive_try(session, ti, s.FAILED)
    next_try = ti.try_number if ti.state == s.UPSTREAM_FAILED else ti.try_number + 1
    cleared = cas(
        session, ti, state=s.NONE, try_number=next_try, max_tries=next_try - 1 + ti.retries,
        attempt_epoch=ti.attempt_epoch + 1, infra_attempts=0, next_eligible_at=None,
        queued_at=None, ended_at=None, **NEW_EXECUTION,
    )
    if cleared is None:
        return None
    refresh_run(session, cleared.dag_run_id, now, reopen=True)
    return session.get(TaskInstance, cleared.id, populate_existing=True)  # readiness may have scheduled it


def mark(*, session: Session, ti: TaskInstance, state: str, now: datetime | None = None) -> TaskInstance | None:
    """An operator's verdict: -> success or failed, new epoch (any in-flight worker is told to
    terminate), try archived."""
    now = now or utcnow()
    if ti.state == state:
        return ti
    lock_run(session, ti.dag_run_id)
    marked = cas(session, ti, state=state, attempt_epoch=ti.attempt_epoch + 1, ended_at=now,
                 last_heartbeat_at=None, next_eligible_at=None)
    return _settled(session, marked, state, now)
