"""Reapers (contract 2.6): find attempts whose worker is gone and route them unexecutable.

A sweep lists candidates, then marks each with a compare-and-swap on the
(id, state, try_number, attempt_epoch) it was listed with: a candidate that moved in between
(it reported, or was re-placed) is left alone. Several replicas may sweep; on PostgreSQL a
transaction-level advisory lock lets one of them do it, and every mark is guarded anyway.
The periodic sweep runs in one process of all those on a PostgreSQL database (`serve
--workers N`, replicas): the one whose reaper holds the session-level leader lock, on a
connection it keeps; when that process ends, its connection and lock go with it and another
process's reaper takes over at its next interval.

An outage of the control plane is nobody's fault (contract 2.6): each process counts silence
toward the agent-lost and dispatch-lost thresholds only from when it last began to reach the
database without a break (its start, or its first contact after a failed one: DatabaseReach),
so after a database outage, or a restart of every replica, the thresholds start again
(docs/decisions/0010-outages-restart-the-lost-thresholds.md).
"""

import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy import Connection, Engine, or_, select, text
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session

from app.auth.attempt_key import AttemptKey
from app.config import Settings
from app.db.dialect import dialect_of
from app.db.retries import retried
from app.db.types import utcnow
from app.execution.attempts import close_attempt
from app.identity.models import Execution
from app.orchestration import states
from app.orchestration.cas import RUN_LOCK, from_sources, lock_runs
from app.orchestration.counts import fold_counts
from app.orchestration.models import TaskInstance
from app.orchestration.outcomes import InfraBackoff, Outcome, apply_outcome
from app.orchestration.promotion import promote_eligible
from app.telemetry.metrics import count_conflict, reaper_marks, reaper_sweep_duration, zeroed

log = logging.getLogger("fenceline.reapers")
SWEEP_LOCK_KEY = 0x66656E6365  # "fence"
LEADER_LOCK_KEY = 0x7265617065  # "reape": a key of its own, so the leader's sweeps can take SWEEP_LOCK_KEY
zeroed(reaper_marks, reason=states.REAPER_MARKS)


@dataclass(frozen=True)
class Candidate:
    """An attempt a sweep listed, with the state it was in and the mark (reason) it is due."""

    key: AttemptKey
    state: str
    reason: str
    # agent-lost only: a heartbeat at or after this saves the attempt, even one that landed
    # between the listing and the mark.
    silent_before: datetime | None = None
    dag_run_id: uuid.UUID | None = None  # the order of a sweep's marks: by run, then task instance


@dataclass(frozen=True)
class Thresholds:
    agent_lost: timedelta
    dispatch_lost: timedelta

    @classmethod
    def from_settings(cls, settings: Settings) -> "Thresholds":
        return cls(timedelta(seconds=settings.agent_lost_after_seconds),
                   timedelta(seconds=settings.dispatch_lost_after_seconds))


class DatabaseReach:
    """Since when this process has reached the database without a break: from its start, and
    again from its first contact after a failed one. Before that, no replica's record of a
    heartbeat can be trusted to be there, so silence before it does not count. Written by the
    reaper's thread, read by sweeps on any thread (one attribute: no lock needed)."""

    def __init__(self) -> None:
        self.since: datetime | None = utcnow()  # None while the database cannot be reached

    def lost(self) -> None:
        self.since = None

    def reached(self) -> bool:
        """A contact succeeded; True when it ends a break (the thresholds start again now)."""
        if self.since is not None:
            return False
        self.since = utcnow()
        return True


def find_candidates(*, session: Session, thresholds: Thresholds, now: datetime,
                    counting_since: datetime | None = None) -> list[Candidate]:
    """agent-lost: running with a heartbeat older than the threshold; dispatch-lost: queued,
    never reported running, for longer than the threshold; worker-lost: in flight on an
    execution that was superseded or observed terminal. Silence before `counting_since` (a
    DatabaseReach's) does not count: until a threshold has passed since then, nothing is
    agent- or dispatch-lost."""
    cols = (TaskInstance.id, TaskInstance.state, TaskInstance.try_number, TaskInstance.attempt_epoch,
            TaskInstance.dag_run_id)
    queries = {
        states.AGENT_LOST: select(*cols).where(
            from_sources(states.AGENT_LOST),
            or_(TaskInstance.last_heartbeat_at < now - thresholds.agent_lost,
                TaskInstance.last_heartbeat_at.is_(None) & (TaskInstance.started_at < now - thresholds.agent_lost))),
        states.DISPATCH_LOST: select(*cols).where(
            from_sources(states.DISPATCH_LOST), TaskInstance.queued_at < now - thresholds.dispatch_lost),
        states.WORKER_LOST: select(*cols).join(Execution, Execution.execution_id == TaskInstance.execution_id).where(
            from_sources(states.WORKER_LOST),
            or_(Execution.superseded_by.is_not(None), Execution.obs_terminal.is_(True))),
    }
    counted = now - counting_since if counting_since is not None else None
    limits = ((states.AGENT_LOST, thresholds.agent_lost), (states.DISPATCH_LOST, thresholds.dispatch_lost))
    for rail, threshold in limits:
        if counted is not None and counted < threshold:
            del queries[rail]
    found: dict[uuid.UUID, Candidate] = {}
    for rail, query in queries.items():  # worker_lost last: it names the cause best
        silent_before = now - thresholds.agent_lost if rail is states.AGENT_LOST else None
        for row in session.execute(query):
            key = AttemptKey(row.id, row.try_number, row.attempt_epoch)
            found[row.id] = Candidate(key, row.state, rail.name, silent_before, row.dag_run_id)
    # In run order, the order the sweep locked their runs in (cas.lock_runs).
    return sorted(found.values(), key=lambda c: (str(c.dag_run_id), str(c.key.ti_id)))


def mark_lost(*, session: Session, candidate: Candidate, backoff: InfraBackoff, now: datetime) -> bool:
    """Route `candidate` as unexecutable(reason) if it is still exactly as listed (and, for
    agent-lost, still silent). The sweep locked the candidate's run, and the task instance is
    locked here before the check, so a report or heartbeat either lands first and saves the
    attempt, or waits and is stale."""
    # Locked only while still as listed: a row that moved on (cleared, claimed again) is left
    # to whoever holds it, never held by the sweep while it goes on to its next candidate.
    ti = session.execute(select(TaskInstance).where(
        TaskInstance.id == candidate.key.ti_id, TaskInstance.state == candidate.state,
        TaskInstance.try_number == candidate.key.try_number,
        TaskInstance.attempt_epoch == candidate.key.attempt_epoch,
    # FOR NO KEY UPDATE, as the run's lock: a foreign-key check of a transaction that holds the
    # row already never waits on the sweep.
    ).with_for_update(**RUN_LOCK).execution_options(populate_existing=True)).scalar_one_or_none()
    if ti is None:
        return False
    heartbeat = ti.last_heartbeat_at
    if candidate.silent_before is not None and heartbeat is not None and heartbeat >= candidate.silent_before:
        return False
    outcome = Outcome("unexecutable", candidate.reason)
    with session.begin_nested():
        moved = apply_outcome(session=session, ti=ti, outcome=outcome, backoff=backoff, now=now,
                              within=states.REAPER_MARKS[candidate.reason])
        if moved is not None:
            close_attempt(session, candidate.key, outcome, now)
    return moved is not None


class Sweeping(Protocol):
    """More work a sweep does after its marks, handed in by the app (the logs' retention,
    app/logs/retention.py, and the history's, app/admin/clean.py); answers how many runs it handled."""

    def sweep(self, *, session: Session, now: datetime) -> int: ...


def sweep(*, session: Session, thresholds: Thresholds, backoff: InfraBackoff, now: datetime | None = None,
          retention: Sweeping | None = None, reach: DatabaseReach | None = None) -> dict[str, int] | None:
    """One sweep: due retries and reschedules are promoted, lost attempts marked (silence
    counted from `reach.since` at the earliest), and with `retention` the logs of a few expired
    runs removed. None when another replica holds the sweep lock."""
    started = time.perf_counter()
    now = now or utcnow()
    # While this process cannot reach the database (as its reaper last found), nothing counts yet.
    counting_since = None if reach is None else reach.since or now
    dialect = dialect_of(session)
    if not dialect.try_hold(session, SWEEP_LOCK_KEY):
        return None
    marked: dict[str, int] = {}
    candidates = find_candidates(session=session, thresholds=thresholds, now=now, counting_since=counting_since)
    # Every candidate's run first, in key order, before any task instance's row: a sweep never
    # waits on a run while it holds a task instance of another (docs/decisions/0013-one-lock-order.md).
    lock_runs(session, {c.dag_run_id for c in candidates if c.dag_run_id is not None})
    for candidate in candidates:
        if mark_lost(session=session, candidate=candidate, backoff=backoff, now=now):
            marked[candidate.reason] = marked.get(candidate.reason, 0) + 1
    # Promotion locks task instances without their runs, so it comes after the marks (which
    # lock runs first): a sweep never waits for a run while holding a task instance.
    promote_eligible(session=session, now=now, skip_locked=not dialect.writers_take_turns)
    if retention is not None and (removed := retention.sweep(session=session, now=now)):
        log.info("retention handled %d runs", removed)
    # The kept counts' deltas, folded by one replica at a time (the sweep's lock).
    fold_counts(session=session)
    for reason, count in marked.items():  # counted once the sweep is through (not when run again)
        reaper_marks.labels(reason=reason).inc(count)
    reaper_sweep_duration.observe(time.perf_counter() - started)
    return marked


class ReaperThread:
    """The periodic sweep of one replica, on its own thread and sessions, re-placing on the
    retry policy the application built at its start (`backoff`)."""

    def __init__(self, engine: Engine, settings: Settings, backoff: InfraBackoff,
                 retention: Sweeping | None = None, reach: DatabaseReach | None = None) -> None:
        self.engine, self.settings, self.backoff, self.retention = engine, settings, backoff, retention
        self.reach = reach or DatabaseReach()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="fenceline-reaper", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=30)

    def _run(self) -> None:
        thresholds = Thresholds.from_settings(self.settings)
        leader: Connection | None = None  # PostgreSQL: the connection holding the leader lock
        while not self.stop_event.wait(self.settings.reaper_interval_seconds):
            try:
                if not dialect_of(self.engine).writers_take_turns and (leader := self._lead(leader)) is None:
                    continue  # another process sweeps
                with Session(self.engine) as session:
                    def swept() -> dict[str, int] | None:
                        done = sweep(session=session, thresholds=thresholds, backoff=self.backoff,
                                     retention=self.retention, reach=self.reach)
                        session.commit()
                        return done
                    marked = retried([session], swept, seen=count_conflict)
                self._reached()
                if marked:
                    log.info("reaper marked %s", marked)
            except Exception as exc:  # a failed sweep must not stop the next one
                if isinstance(exc, DBAPIError) and exc.connection_invalidated:
                    self.reach.lost()  # the database went away under the sweep
                log.exception("reaper sweep failed")
        if leader is not None:
            _discard(leader)

    def _lead(self, leader: Connection | None) -> Connection | None:
        """The connection holding the leader lock, kept (checked with a trivial query) or newly
        won; None while another process holds it, or while the database cannot be reached.
        Never raises: a connection that failed in any way (a DBAPIError, or SQLAlchemy's own
        ResourceClosedError once it was closed under us) is dropped, never kept, so the sweeps
        resume at the first interval after the database returns."""
        if leader is not None:
            try:
                leader.execute(text("SELECT 1")).scalar()
                leader.commit()
                self._reached()
                return leader
            except Exception:  # the connection, and with it the lock, is gone
                self.reach.lost()
                _discard(leader)
        conn = None
        try:
            conn = self.engine.connect()
            won = dialect_of(conn).try_lead(conn, LEADER_LOCK_KEY)
            conn.commit()
        except Exception as exc:  # the database is away: try again at the next interval
            self.reach.lost()
            log.warning("reaper could not reach the database (%s: %s); trying again in %.1fs",
                        type(exc).__name__, exc, self.settings.reaper_interval_seconds)
            if conn is not None:
                _discard(conn)
            return None
        self._reached()
        if not won:
            conn.close()
            return None
        print(f"fenceline: this process (pid {os.getpid()}) runs the reaper's sweeps", flush=True)
        return conn

    def _reached(self) -> None:
        """The database answered (a check, a connect, a sweep): a break, if there was one, ends."""
        if self.reach.reached():
            log.warning("reaper reached the database again: silence before now does not count toward "
                        "agent_lost_after or dispatch_lost_after (the thresholds start again)")


def _discard(conn: Connection) -> None:
    """Give `conn` up for good, whatever state it is in."""
    try:
        conn.invalidate()
        conn.close()
    except Exception:  # closed already, or its socket is gone: nothing is left to release
        log.debug("discarding the reaper's connection failed", exc_info=True)
