"""Retention (FENCELINE_LOG_RETENTION_DAYS): the logs of runs that ended before the cut-off are
removed from the store, a few runs per reaper sweep, so a sweep's work stays bounded however
much is due. A removed log still reads: its system lines, then one line saying when retention
removed it (app/logs/service.py)."""

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, or_, select
from sqlmodel import Session

from app.config import Settings
from app.db.statements import upsert
from app.execution.history import run_attempts
from app.logs.models import LogRemoval
from app.logs.service import log_key
from app.logs.stores.base import LogStore, LogStoreFault
from app.orchestration.models import DagRun
from app.orchestration.runs import run_task_instances

log = logging.getLogger("fenceline.retention")
RUNS_PER_SWEEP = 20


def due_runs(*, session: Session, before: datetime, limit: int) -> list[tuple[uuid.UUID, datetime]]:
    """Runs that ended before `before` and whose logs were not removed since that end, oldest
    end first. Only ends at or after the newest end already handled are looked at (an index
    range on dag_runs.ended_at), so a sweep does not walk every run retention ever removed."""
    handled = session.execute(select(func.max(LogRemoval.run_ended_at))).scalar()
    query = (select(DagRun.id, DagRun.ended_at)
             .outerjoin(LogRemoval, LogRemoval.dag_run_id == DagRun.id)
             .where(DagRun.ended_at < before,
                    or_(LogRemoval.run_ended_at.is_(None), LogRemoval.run_ended_at != DagRun.ended_at))
             .order_by(DagRun.ended_at).limit(limit))
    if handled is not None:
        query = query.where(DagRun.ended_at >= handled)
    return [(row.id, row.ended_at) for row in session.execute(query)]


@dataclass(frozen=True)
class Retention:
    store: LogStore
    days: float

    @classmethod
    def from_settings(cls, settings: Settings, store: LogStore) -> "Retention | None":
        return cls(store, settings.log_retention_days) if settings.log_retention_days else None

    def sweep(self, *, session: Session, now: datetime, limit: int = RUNS_PER_SWEEP) -> int:
        """Remove the logs of at most `limit` due runs; answers how many runs were done. A store
        fault ends the batch (the run stays due and the next sweep tries again)."""
        return _remove_expired(session=session, store=self.store, before=now - timedelta(days=self.days), now=now,
                               limit=limit)


def _run_keys(session: Session, dag_run_id: uuid.UUID) -> list[str]:
    """Every key a run's logs may be stored under: each try of each task instance, under the
    epochs recorded for it and the legacy epoch 0."""
    epochs: dict[tuple[uuid.UUID, int], set[int]] = {}
    for attempt in run_attempts(session, dag_run_id):
        epochs.setdefault((attempt.task_instance_id, attempt.try_number), set()).add(attempt.attempt_epoch)
    return [log_key(ti, n, epoch) for ti in run_task_instances(session=session, dag_run_id=dag_run_id)
            for n in range(1, ti.try_number + 1) for epoch in {0} | epochs.get((ti.id, n), set())]


def _remove_expired(*, session: Session, store: LogStore, before: datetime, now: datetime, limit: int) -> int:
    done = 0
    for run_id, ended_at in due_runs(session=session, before=before, limit=limit):
        keys = _run_keys(session, run_id)
        try:
            store.delete(keys, session=session)
        except LogStoreFault as exc:
            log.warning("retention could not remove the logs of run %s: %s", run_id, exc)
            break
        upsert(session, LogRemoval.__table__, {"dag_run_id": run_id, "run_ended_at": ended_at, "removed_at": now},
               ["dag_run_id"], {"run_ended_at": ended_at, "removed_at": now})
        done += 1
    return done
