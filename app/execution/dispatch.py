"""Claims: an admitted execution takes ready work, each row claiming a new attempt epoch."""

import uuid
from datetime import datetime

from sqlalchemy import or_, select, update
from sqlmodel import Session

from app.db import is_postgres, utcnow
from app.errors import AppError
from app.execution.attempts import open_attempt
from app.identity.models import Execution
from app.orchestration import states as s
from app.orchestration.models import DagRun, TaskInstance
from app.orchestration.rails import NEW_EXECUTION, from_sources, moved_to, promote_eligible


def require_current_execution(session: Session, execution_id: uuid.UUID) -> Execution:
    """The claiming execution, which must be admitted, not superseded and not observed
    terminal: a superseded execution's worker token claims nothing."""
    execution = session.get(Execution, execution_id)
    if execution is None or execution.superseded_by is not None or execution.obs_terminal:
        why = "is unknown" if execution is None else (
            f"was superseded by {execution.superseded_by}" if execution.superseded_by else "was observed terminal")
        raise AppError(409, "stale-execution", "Stale execution", f"Execution {execution_id} {why}.",
                       should_terminate=True)
    return execution


def claim(*, session: Session, execution_id: uuid.UUID, limit: int,
          now: datetime | None = None) -> list[tuple[TaskInstance, DagRun]]:
    """scheduled -> queued (the claim rail) for up to `limit` ready task instances, in one
    guarded UPDATE … RETURNING that bumps attempt_epoch, clears last_heartbeat_at and binds the
    execution. Rows another claimer holds are skipped (SKIP LOCKED on PostgreSQL; SQLite
    serialises writers), so two claimers never get the same task instance."""
    now = now or utcnow()
    require_current_execution(session, execution_id)
    skip_locked = is_postgres(session)
    promote_eligible(session=session, now=now, skip_locked=skip_locked)
    ready = (
        select(TaskInstance.id)
        .where(from_sources(s.CLAIM),
               or_(TaskInstance.next_eligible_at.is_(None), TaskInstance.next_eligible_at <= now))
        .order_by(TaskInstance.updated_at, TaskInstance.id)
        .limit(limit)
    )
    if skip_locked:
        ready = ready.with_for_update(skip_locked=True)
    # A CTE, evaluated once: as an IN subquery PostgreSQL may re-run it per row (nested-loop
    # semi join), and a re-run skips the rows this statement already updated and takes the
    # next ones, claiming more than `limit`. A locking CTE is never inlined.
    ready_once = ready.cte("ready")
    claimed = list(session.execute(
        update(TaskInstance)
        .where(TaskInstance.id.in_(select(ready_once.c.id)), from_sources(s.CLAIM))
        .values(**moved_to(s.CLAIM, now), queued_at=now, next_eligible_at=None,
                **{**NEW_EXECUTION, "execution_id": execution_id})
        .returning(TaskInstance)
        .execution_options(populate_existing=True, synchronize_session=False)
    ).scalars())
    if not claimed:
        return []
    runs = {r.id: r for r in session.execute(
        select(DagRun).where(DagRun.id.in_({ti.dag_run_id for ti in claimed}))).scalars()}
    for ti in claimed:
        open_attempt(session, ti, now)
    claimed.sort(key=lambda ti: (ti.dag_id, ti.run_id, ti.task_id, ti.map_index))
    return [(ti, runs[ti.dag_run_id]) for ti in claimed]
