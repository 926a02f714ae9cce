"""Substrate observations of an attempt (contract 2.7).

An observation is recorded on its own attempt's record. Only an explicit outcome settles, and
only through the settle fence on the observed (try_number, attempt_epoch): a terminal
observation of a superseded attempt never settles the live one, and a Pod phase alone decides
nothing.
"""

from datetime import datetime

from sqlmodel import Session

from app.auth.tokens import AttemptClaims
from app.db import utcnow
from app.errors import not_found
from app.execution import fence
from app.execution.attempts import find_attempt, update_attempt
from app.execution.schemas import ObservationIn, Report
from app.orchestration.models import TaskInstance
from app.orchestration.rails import Backoff


def observe(*, session: Session, observation: ObservationIn, backoff: Backoff,
            now: datetime | None = None) -> tuple[TaskInstance, bool, bool]:
    """Answers (task instance, recorded on an attempt record, settled)."""
    now = now or utcnow()
    ti = session.get(TaskInstance, observation.ti_id)
    if ti is None:
        raise not_found("task-instance", f"No task instance {observation.ti_id}.")
    recorded = find_attempt(session, ti.id, observation.try_number, observation.attempt_epoch) is not None
    if recorded:
        update_attempt(session, ti.id, observation.try_number, observation.attempt_epoch,
                       observed_phase=observation.phase, observed_reason=observation.reason)
    if observation.outcome is None:
        return ti, recorded, False
    token = AttemptClaims(ti.id, observation.try_number, observation.attempt_epoch, 0, {})
    settled = fence.report(session=session, token=token, backoff=backoff, now=now,
                           body=Report(state=observation.outcome, reason=observation.reason))
    return settled, recorded, True
