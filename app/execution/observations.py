"""Substrate observations of an attempt (contract 2.7).

An observation is recorded on its own attempt's record. Only an explicit outcome settles, and
only through the settle fence on the observed attempt key: a terminal observation of a
superseded attempt never settles the live one, and a Pod phase alone decides nothing.
"""

from datetime import datetime

from sqlmodel import Session

from app.auth.attempt_key import AttemptKey
from app.db.types import utcnow
from app.execution import fence
from app.execution.attempts import find_attempt, update_attempt
from app.execution.schemas import ObservationIn, Report
from app.orchestration.models import TaskInstance
from app.orchestration.outcomes import InfraBackoff
from app.orchestration.runs import get_task_instance


def observe(*, session: Session, observation: ObservationIn, backoff: InfraBackoff,
            now: datetime | None = None) -> tuple[TaskInstance, bool, bool]:
    """Answers (task instance, recorded on an attempt record, settled)."""
    now = now or utcnow()
    ti = get_task_instance(session=session, ti_id=observation.ti_id)
    key = AttemptKey(ti.id, observation.try_number, observation.attempt_epoch)
    settled = None
    if observation.outcome is not None:
        # Settle first: the fence locks the run, then the task instance, then the attempt
        # record, in the order every settling path takes them.
        settled = fence.report(session=session, key=key, backoff=backoff, now=now,
                               body=Report(state=observation.outcome, reason=observation.reason))
    recorded = find_attempt(session, key) is not None
    if recorded:
        update_attempt(session, key, observed_phase=observation.phase, observed_reason=observation.reason)
    return settled or ti, recorded, settled is not None
