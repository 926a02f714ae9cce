"""Removing history (contract 8): `fenceline db clean --before DATE` and
FENCELINE_HISTORY_RETENTION_DAYS delete finished runs that ended before a date, with their task
instances, tries' history, attempt records, retention records and logs (every log store).

Only runs in a terminal state (success, failed) go; the identity tables (seats, executions: every
generation and every pod UID ever bound) are never touched, and a live row's epoch never goes
because a live row's run is not finished. A run goes in two short transactions. The first marks
its logs removed, as log retention does (a LogRemoval row): from its commit on, readers show the
removal line and never ask the store for the run's streams. The second locks the marked runs FOR
UPDATE SKIP LOCKED, checked again in the same statement (a run cleared meanwhile is running
again; one a clear holds is left), then their task instances, removes the logs from the store and
deletes the rows, children first. Killed anywhere, a clean leaves rows that read as they did or
as removed, never a row naming a stream that is gone (an S3 index row whose object was deleted
would answer 503), and the next clean finishes; the other order would leave streams that no row
names, never found again (docs/decisions/0014-db-clean.md).
"""

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta

from sqlalchemy import Engine, Select, and_, delete, exists, func, or_, select
from sqlmodel import Session

from app.config import Settings
from app.db.dialect import dialect_of
from app.db.retries import retried
from app.db.statements import one_of, upsert
from app.db.types import utcnow
from app.execution.models import TaskAttempt
from app.execution.reapers import Sweeping
from app.logs.models import LogRemoval
from app.logs.retention import Retention
from app.logs.service import log_key
from app.logs.stores.base import LogStore, LogStoreFault
from app.orchestration import states
from app.orchestration.cas import HISTORY, RUNS, TI
from app.telemetry.metrics import count_conflict

log = logging.getLogger("fenceline.clean")
ATTEMPTS, REMOVALS = TaskAttempt.__table__, LogRemoval.__table__
FINISHED_RUN = one_of(RUNS.c.state, (states.SUCCESS.value, states.FAILED.value))  # a run's terminal states
BATCH_RUNS = 50  # runs per transaction of `db clean` (some 500 task instances at runs of 10)
RUNS_PER_SWEEP = 20  # runs per reaper sweep of FENCELINE_HISTORY_RETENTION_DAYS


@dataclass
class Counts:
    """Rows per table, and log streams (keys) asked of the store: what a clean deleted, or a dry
    run would delete."""

    dag_runs: int = 0
    task_instances: int = 0
    task_instance_history: int = 0
    task_attempts: int = 0
    log_removals: int = 0
    log_streams: int = 0
    skipped: list[uuid.UUID] = field(default_factory=list)  # candidates another transaction held

    def add(self, other: "Counts") -> None:
        for f in fields(self):
            if f.name != "skipped":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        self.skipped += other.skipped

    def tables(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "skipped"}


def _due(before: datetime) -> Select:
    return select(RUNS.c.id, RUNS.c.dag_id, RUNS.c.ended_at).where(FINISHED_RUN, RUNS.c.ended_at < before)


def kept_runs(*, session: Session, keep_last: int) -> set[uuid.UUID]:
    """The newest `keep_last` finished runs of each DAG (by end), whatever their age."""
    if keep_last <= 0:
        return set()
    rank = func.row_number().over(partition_by=RUNS.c.dag_id, order_by=(RUNS.c.ended_at.desc(), RUNS.c.id.desc()))
    ranked = select(RUNS.c.id, rank.label("rank")).where(FINISHED_RUN).subquery()
    return set(session.execute(select(ranked.c.id).where(ranked.c.rank <= keep_last)).scalars())


def due_runs(*, session: Session, before: datetime, limit: int,
             after: tuple[datetime, uuid.UUID] | None = None) -> list[tuple[uuid.UUID, datetime]]:
    """Finished runs that ended before `before`, oldest end first (an index range on
    dag_runs.ended_at), past the (ended_at, id) `after` when given."""
    query = _due(before).order_by(RUNS.c.ended_at, RUNS.c.id).limit(limit)
    if after is not None:
        query = query.where(or_(RUNS.c.ended_at > after[0], and_(RUNS.c.ended_at == after[0], RUNS.c.id > after[1])))
    return [(row.id, row.ended_at) for row in session.execute(query)]


def plan(*, session: Session, before: datetime, keep_last: int = 0) -> Counts:
    """What a clean would delete now (the dry run): counted, nothing changed."""
    runs = _due(before).subquery()
    if keep_last > 0:
        rank = func.row_number().over(partition_by=RUNS.c.dag_id,
                                      order_by=(RUNS.c.ended_at.desc(), RUNS.c.id.desc()))
        ranked = select(RUNS.c.id, RUNS.c.ended_at, rank.label("rank")).where(FINISHED_RUN).subquery()
        runs = select(ranked.c.id).where(ranked.c.rank > keep_last, ranked.c.ended_at < before).subquery()
    ids = select(runs.c.id)
    tis = select(TI.c.id).where(TI.c.dag_run_id.in_(ids))
    count = lambda query: session.execute(query).scalar() or 0  # noqa: E731
    counts = Counts(
        dag_runs=count(select(func.count()).select_from(runs)),
        task_instances=count(select(func.count()).where(TI.c.dag_run_id.in_(ids))),
        task_instance_history=count(select(func.count()).where(HISTORY.c.task_instance_id.in_(tis))),
        task_attempts=count(select(func.count()).where(ATTEMPTS.c.task_instance_id.in_(tis))),
        log_removals=count(select(func.count()).where(REMOVALS.c.dag_run_id.in_(ids))))
    # Every try's legacy key, and one per recorded epoch other than 0 (_log_keys).
    counts.log_streams = count(select(func.sum(TI.c.try_number)).where(TI.c.dag_run_id.in_(ids))) + count(
        select(func.count()).where(ATTEMPTS.c.task_instance_id.in_(tis), ATTEMPTS.c.attempt_epoch != 0))
    return counts


def _log_keys(session: Session, run_ids: list[uuid.UUID]) -> list[str]:
    """Every key the runs' logs may be stored under: each try of each task instance, under the
    epochs recorded for it and the legacy epoch 0 (as retention removes them)."""
    tis = session.execute(select(TI.c.id, TI.c.dag_id, TI.c.run_id, TI.c.task_id, TI.c.map_index, TI.c.try_number)
                          .where(TI.c.dag_run_id.in_(run_ids))).all()
    epochs: dict[tuple[uuid.UUID, int], set[int]] = {}
    for row in session.execute(select(ATTEMPTS.c.task_instance_id, ATTEMPTS.c.try_number, ATTEMPTS.c.attempt_epoch)
                               .join(TI, TI.c.id == ATTEMPTS.c.task_instance_id).where(TI.c.dag_run_id.in_(run_ids))):
        epochs.setdefault((row.task_instance_id, row.try_number), set()).add(row.attempt_epoch)
    return [log_key(ti, n, epoch) for ti in tis for n in range(1, ti.try_number + 1)
            for epoch in sorted({0} | epochs.get((ti.id, n), set()))]


def mark_runs(*, session: Session, run_ids: list[uuid.UUID], before: datetime, now: datetime) -> list[uuid.UUID]:
    """Mark the logs of those of `run_ids` still finished and ended before `before` as removed
    (what retention records), in the caller's transaction (it commits before delete_runs); answers
    them. Their runs are locked SKIP LOCKED, so a run a clear holds is left, and never waited on."""
    if not run_ids:
        return []
    lock = select(RUNS.c.id, RUNS.c.ended_at).where(RUNS.c.id.in_(run_ids), FINISHED_RUN, RUNS.c.ended_at < before)
    due = session.execute(dialect_of(session).for_update(lock.order_by(RUNS.c.id), skip_locked=True, key_share=True))
    marked = []
    for run, ended_at in due:
        upsert(session, REMOVALS, {"dag_run_id": run, "run_ended_at": ended_at, "removed_at": now}, ["dag_run_id"],
               {"run_ended_at": ended_at, "removed_at": now}, where=REMOVALS.c.run_ended_at != ended_at)
        marked.append(run)
    return marked


def delete_runs(*, session: Session, store: LogStore, run_ids: list[uuid.UUID], before: datetime) -> Counts:
    """Delete those of `run_ids` still finished, ended before `before` and marked (mark_runs,
    committed), with all they hold, in the caller's transaction (it commits). Runs first, in key
    order, then their task instances (the one lock order, decision 0013); SKIP LOCKED, so a run
    another transaction holds is left (counted as skipped) and this never waits on a run. A
    LogStoreFault leaves the transaction to be rolled back: the rows stay, and read as removed."""
    if not run_ids:
        return Counts()
    dialect = dialect_of(session)
    marked = exists().where(REMOVALS.c.dag_run_id == RUNS.c.id, REMOVALS.c.run_ended_at == RUNS.c.ended_at)
    lock = (select(RUNS.c.id).where(RUNS.c.id.in_(run_ids), FINISHED_RUN, RUNS.c.ended_at < before, marked)
            .order_by(RUNS.c.id))
    runs = list(session.execute(dialect.for_update(lock, skip_locked=True)).scalars())
    counts = Counts(skipped=sorted(set(run_ids) - set(runs)))
    if not runs:
        return counts
    # Nothing holds a finished run's task instances without their run: this does not wait.
    session.execute(dialect.for_update(select(TI.c.id).where(TI.c.dag_run_id.in_(runs)).order_by(TI.c.id))).all()
    keys = _log_keys(session, runs)
    store.delete(keys, session=session)
    tis = select(TI.c.id).where(TI.c.dag_run_id.in_(runs))
    counts.log_streams = len(keys)
    counts.task_attempts = session.execute(delete(ATTEMPTS).where(ATTEMPTS.c.task_instance_id.in_(tis))).rowcount
    counts.task_instance_history = session.execute(
        delete(HISTORY).where(HISTORY.c.task_instance_id.in_(tis))).rowcount
    counts.task_instances = session.execute(delete(TI).where(TI.c.dag_run_id.in_(runs))).rowcount
    counts.log_removals = session.execute(delete(REMOVALS).where(REMOVALS.c.dag_run_id.in_(runs))).rowcount
    counts.dag_runs = session.execute(delete(RUNS).where(RUNS.c.id.in_(runs))).rowcount
    return counts


def clean(engine: Engine, store: LogStore, *, before: datetime, keep_last: int = 0, batch_runs: int = BATCH_RUNS,
          batches: int | None = None, progress: Callable[[Counts], None] | None = None) -> Counts:
    """Delete every finished run that ended before `before` (at the latest: now) but each DAG's
    newest `keep_last`, `batch_runs` runs per batch (two short transactions: mark, delete), at
    most `batches` batches (None: until none is due). Answers what was deleted; `progress` hears
    the total after each batch. Resumable: what a killed clean left is due to the next one."""
    before = min(before, utcnow())  # a run that ends while this runs is never a candidate
    with Session(engine) as session:
        kept = kept_runs(session=session, keep_last=keep_last)
    total, after, done = Counts(), None, 0
    while batches is None or done < batches:
        with Session(engine) as session:
            due = due_runs(session=session, before=before, limit=batch_runs, after=after)
            if not due:
                break
            after = (due[-1][1], due[-1][0])  # past kept and skipped runs; deleted ones are gone anyway
            run_ids = [run for run, _ in due if run not in kept]
            marked = mark_runs(session=session, run_ids=run_ids, before=before, now=utcnow())
            session.commit()  # readers show the runs' logs as removed before any is

            def delete_batch(session: Session = session, marked: list[uuid.UUID] = marked) -> Counts:
                counts = delete_runs(session=session, store=store, run_ids=marked, before=before)
                session.commit()
                return counts
            counts = retried([session], delete_batch, seen=count_conflict)  # a deadlock's victim runs again
            counts.skipped = sorted(set(run_ids) - set(marked)) + counts.skipped
            total.add(counts)
        done += 1
        if progress is not None:
            progress(total)
    return total


@dataclass(frozen=True)
class HistoryRetention:
    """FENCELINE_HISTORY_RETENTION_DAYS: a few expired runs per reaper sweep, in the sweep's
    transaction (after its marks: runs are taken SKIP LOCKED, so the sweep never waits on a run
    while it holds task instances). A sweep deletes the runs an earlier sweep marked, then marks
    the next few. Log retention, when set, runs first."""

    store: LogStore
    days: float
    logs: Retention | None = None

    def sweep(self, *, session: Session, now: datetime, limit: int = RUNS_PER_SWEEP) -> int:
        """Answers how many runs were handled: their logs removed, or the runs deleted."""
        handled = self.logs.sweep(session=session, now=now) if self.logs is not None else 0
        before = now - timedelta(days=self.days)
        due = [run for run, _ in due_runs(session=session, before=before, limit=limit)]
        deleted = 0
        try:
            with session.begin_nested():  # a store fault undoes the deletes, never the sweep's marks
                deleted = delete_runs(session=session, store=self.store, run_ids=due, before=before).dag_runs
        except LogStoreFault as exc:
            log.warning("history retention could not remove the logs of %d runs: %s", len(due), exc)
        if deleted < limit:  # the next sweep deletes these
            due = [run for run, _ in due_runs(session=session, before=before, limit=limit - deleted)]
            handled += len(mark_runs(session=session, run_ids=due, before=before, now=now))
        if deleted:
            log.info("history retention deleted %d runs that ended before %s", deleted, before.isoformat())
        return handled + deleted


def retention(settings: Settings, store: LogStore) -> Sweeping | None:
    """What the reaper's sweep removes beside its marks: expired logs, expired runs, or none."""
    logs = Retention.from_settings(settings, store)
    if settings.history_retention_days:
        return HistoryRetention(store, settings.history_retention_days, logs)
    return logs
