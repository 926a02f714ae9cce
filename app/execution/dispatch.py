"""Claims: an admitted execution takes ready work, each row claiming a new attempt epoch."""

import uuid
from datetime import datetime

from sqlalchemy import Row, or_, select, update
from sqlmodel import Session

from app.db import is_postgres, utcnow
from app.errors import AppError
from app.execution.attempts import open_attempts
from app.identity.models import Execution
from app.orchestration import states as s
from app.orchestration.rails import NEW_EXECUTION, RUNS, TI, from_sources, moved_to, promote_eligible

EXECUTIONS = Execution.__table__


def require_current_execution(session: Session, execution_id: uuid.UUID) -> None:
    """The claiming execution must be admitted, not superseded and not observed terminal: a
    superseded execution's worker token claims nothing."""
    execution = session.execute(select(EXECUTIONS.c.superseded_by, EXECUTIONS.c.obs_terminal)
                                .where(EXECUTIONS.c.execution_id == execution_id)).first()
    if execution is None or execution.superseded_by is not None or execution.obs_terminal:
        why = "is unknown" if execution is None else (
            f"was superseded by {execution.superseded_by}" if execution.superseded_by else "was observed terminal")
        raise AppError(409, "stale-execution", "Stale execution", f"Execution {execution_id} {why}.",
                       should_terminate=True)


# What a claim answers of each claimed row: its WorkItem's payload and correlation (with the
# run's tenant and trace, read in the same statement).
_RUN_OF = RUNS.c.id == TI.c.dag_run_id
CLAIMED_COLUMNS = (TI.c.id, TI.c.dag_run_id, TI.c.dag_id, TI.c.run_id, TI.c.task_id, TI.c.map_index, TI.c.payload,
                   TI.c.try_number, TI.c.attempt_epoch, TI.c.execution_id,
                   select(RUNS.c.tenant_id).where(_RUN_OF).scalar_subquery().label("tenant_id"),
                   select(RUNS.c.trace_id).where(_RUN_OF).scalar_subquery().label("trace_id"))


def claim(*, session: Session, execution_id: uuid.UUID, limit: int,
          now: datetime | None = None) -> list[tuple[Row, Row]]:
    """scheduled -> queued (the claim rail) for up to `limit` ready task instances, in one
    guarded UPDATE … RETURNING that bumps attempt_epoch, clears last_heartbeat_at and binds the
    execution. Rows another claimer holds are skipped (SKIP LOCKED on PostgreSQL; SQLite
    serialises writers), so two claimers never get the same task instance. Answers (task
    instance, run) pairs; one Core row serves as both (it carries the run's tenant and trace)."""
    now = now or utcnow()
    require_current_execution(session, execution_id)
    skip_locked = is_postgres(session)
    promote_eligible(session=session, now=now, skip_locked=skip_locked)
    ready = (
        select(TI.c.id)
        .where(from_sources(s.CLAIM), or_(TI.c.next_eligible_at.is_(None), TI.c.next_eligible_at <= now))
        .order_by(TI.c.updated_at, TI.c.id)
        .limit(limit)
    )
    if skip_locked:
        ready = ready.with_for_update(skip_locked=True)
    # A CTE, evaluated once: as an IN subquery PostgreSQL may re-run it per row (nested-loop
    # semi join), and a re-run skips the rows this statement already updated and takes the
    # next ones, claiming more than `limit`. A locking CTE is never inlined.
    ready_once = ready.cte("ready")
    claimed = session.execute(
        update(TI)
        .where(TI.c.id.in_(select(ready_once.c.id)), from_sources(s.CLAIM))
        .values(**moved_to(s.CLAIM, now), queued_at=now, next_eligible_at=None,
                **{**NEW_EXECUTION, "execution_id": execution_id})
        .returning(*CLAIMED_COLUMNS)
    ).all()
    if not claimed:
        return []
    open_attempts(session, claimed, now)
    claimed.sort(key=lambda ti: (ti.dag_id, ti.run_id, ti.task_id, ti.map_index))
    return [(ti, ti) for ti in claimed]
