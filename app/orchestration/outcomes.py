"""Outcomes: how one attempt's single outcome moves its task instance, and the try's archive.

A reported outcome (success, failed, unexecutable, rescheduled) comes in by one call,
settle_attempt, and takes the rail the retry policy chooses (apply_outcome); a finished try is
archived once and readiness is judged for the run (app/orchestration/readiness.py). A success
reported by the attempt in flight, the hot path, is one guarded statement (settle_success) that
on PostgreSQL also archives the try. Both archive statements write the same columns (archived),
and tests/orchestration/test_success_paths.py holds the two success paths to the same rows on
both databases.

The retry policy (InfraBackoff) is built once from the settings at the application's start and
handed down to the rails. Every move to a state claimable at a later `next_eligible_at`
announces it in the same transaction.
"""

import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any, Literal

from sqlalchemy import CTE, Executable, Insert, Row, bindparam, exists, literal, select, update
from sqlmodel import Session

from app.auth.attempt_key import AttemptKey
from app.db.dialect import Dialect, dialect_of
from app.db.statements import one_of
from app.db.types import UTCDateTime, utcnow
from app.orchestration import states
from app.orchestration.cas import (
    HISTORY,
    NEW_EXECUTION,
    TI,
    cas,
    from_sources,
    lock_run,
    lock_run_of,
    moved_to,
    read_task_instance,
)
from app.orchestration.events import announce, announce_room, room_notification
from app.orchestration.models import TaskInstance
from app.orchestration.readiness import ready_downstream, refresh_run, settle_run
from app.orchestration.states import Rail


@dataclass(frozen=True)
class Outcome:
    """The single outcome of one attempt, as execution hands it over."""

    kind: Literal["success", "failed", "unexecutable", "rescheduled"]
    reason: str | None = None
    reschedule_at: datetime | None = None


@dataclass(frozen=True)
class InfraBackoff:
    """Exponential back-off for infra re-places: min(cap, base * 2**n), with equal jitter."""

    base_seconds: float = 5.0
    cap_seconds: float = 300.0

    @classmethod
    def from_settings(cls, settings: Any) -> "InfraBackoff":
        """The settings' retry policy: built once, at the application's start (app/main.py)."""
        return cls(settings.infra_backoff_base_seconds, settings.infra_backoff_cap_seconds)

    def delay(self, infra_attempts: int) -> timedelta:
        ceiling = min(self.cap_seconds, self.base_seconds * 2 ** infra_attempts)
        return timedelta(seconds=ceiling * random.uniform(0.5, 1.0))


# A statement of the caller's that rides on the row settle_success moves (PostgreSQL): given the
# CTE of the moved row, a data-modifying CTE answering the ids of the rows it changed. Pass a
# module-level function: the statement is built once per function (functools.cache).
Alongside = Callable[[CTE], CTE]


# What a try's archive copies of the row as it is, beside its key and the state it archives.
ARCHIVED = ("infra_attempts", "last_failure_kind", "last_failure_reason", "execution_id", "queued_at", "started_at",
            "ended_at")
ARCHIVE_KEY = ("task_instance_id", "try_number")  # a try is archived once: one row per try


def archived(row: Any, archive_id: Any, state: Any) -> dict[str, Any]:
    """The archive of the try `row` is on (a task instance, a returned row, or the columns of
    the success rail's moved row), column by column: what both archive statements write."""
    return {"id": archive_id, "task_instance_id": row.id, "try_number": row.try_number,
            "attempt_epoch": row.attempt_epoch, "state": state, **{name: getattr(row, name) for name in ARCHIVED}}


def archiving(dialect: Dialect, archive: dict[str, Any]) -> Insert:
    """INSERT … SELECT of `archive` (bound values, or the columns of a moved row) unless its try
    has a row already, ON CONFLICT DO NOTHING with no conflict target: correct whichever unique
    key the history has, (task_instance_id, try_number) before migration 0013 or
    (task_instance_id, try_number, attempt_epoch) from it on (a release's code works before its
    contract migrations: docs/decisions/0011). Every archive runs under its run's lock, so the
    NOT EXISTS sees a try archived by another transaction; ON CONFLICT covers the same attempt
    archived twice. One row per try, as before: the per-epoch rows the new key allows are a later
    release's to write."""
    already = exists().where(*(HISTORY.c[name] == archive[name] for name in ARCHIVE_KEY)).correlate_except(HISTORY)
    return (dialect.insert(HISTORY).from_select(list(archive), select(*archive.values()).where(~already))
            .on_conflict_do_nothing())


@cache
def _archiving_try(dialect: Dialect) -> Insert:
    names = ("id", *ARCHIVE_KEY, "attempt_epoch", "state", *ARCHIVED)  # what archived() answers
    return archiving(dialect, {name: bindparam(name, type_=HISTORY.c[name].type) for name in names})


def archive_try(session: Session, ti: TaskInstance | Row, state: str) -> None:
    """Record a finished try once; a second archive of the same try does nothing."""
    session.execute(_archiving_try(dialect_of(session)), archived(ti, uuid.uuid4(), state))


def settled(session: Session, ti: TaskInstance | None, archived_state: str | None,
            now: datetime) -> TaskInstance | None:
    """After a rail moved `ti` (None: it lost the race): its try archived as `archived_state`
    when given, and readiness judged when it finished."""
    if ti is not None:
        if archived_state is not None:
            archive_try(session, ti, archived_state)
        if ti.state in states.FINISHED:
            refresh_run(session, ti.dag_run_id, now)
    return ti


def settle_attempt(
    *, session: Session, key: AttemptKey, outcome: Outcome, backoff: InfraBackoff, now: datetime,
    run_locked: bool = False, alongside: Alongside | None = None, params: Mapping[str, object] | None = None,
) -> TaskInstance | Row | None:
    """Settle attempt `key` with its outcome if it is the live attempt and in flight (the settle
    rule): its run locked first unless the caller holds it, then a success's one statement
    (settle_success, with `alongside` and `params`) or the rail the retry policy chooses.

    None, having changed nothing, if `key` is not that attempt or names no task instance."""
    if not run_locked and not lock_run_of(session, key.ti_id):
        return None
    if outcome.kind == "success":
        return settle_success(session=session, ti_id=key.ti_id, try_number=key.try_number,
                              attempt_epoch=key.attempt_epoch, now=now, alongside=alongside, params=params)
    ti = read_task_instance(session, key.ti_id)
    if ti is None or AttemptKey.of(ti) != key or ti.state not in states.IN_FLIGHT:
        return None
    return apply_outcome(session=session, ti=ti, outcome=outcome, backoff=backoff, now=now, locked=True)


def apply_outcome(
    *, session: Session, ti: TaskInstance, outcome: Outcome, backoff: InfraBackoff, now: datetime | None = None,
    within: Rail | None = None, locked: bool = False,
) -> TaskInstance | None:
    """Route one attempt's outcome from the state `ti` was read in. None if the attempt was
    superseded meanwhile.

    A success ends the try. An application failure spends it: up_for_retry while try_number <=
    max_tries, else failed. An infra fault (unexecutable) re-places the same try on the back-off
    budget, and ends in infra_failed once the budget is spent, or at once for a non-idempotent
    task whose user code started. A reschedule waits for reschedule_at on the same try.
    `within` (a reaper's mark) narrows the states the outcome may be applied from, and `locked`
    says the caller holds the run's lock already.
    """
    now = now or utcnow()
    if not locked:
        lock_run(session, ti.dag_run_id)

    def move(rail: Rail, **values: Any) -> TaskInstance | None:
        return cas(session, ti, rail, now, within=within, **values)

    def move_to_wait(rail: Rail, **values: Any) -> TaskInstance | None:
        """A move to a state claimable once `next_eligible_at` has passed."""
        moved = move(rail, **values)
        if moved is not None:
            announce(session, count=1, at=moved.next_eligible_at, queue=moved.queue)
        return moved

    if outcome.kind == "success":
        return settled(session, move(states.SUCCEED, ended_at=now), states.SUCCESS, now)
    if outcome.kind == "failed":
        failure = {"last_failure_kind": "app", "last_failure_reason": outcome.reason, "ended_at": now}
        if ti.try_number <= ti.max_tries:
            retry_at = now + timedelta(seconds=ti.retry_delay_seconds)
            return settled(session, move_to_wait(states.FAIL_FOR_RETRY, next_eligible_at=retry_at, **failure),
                           states.FAILED, now)
        return settled(session, move(states.FAIL, **failure), states.FAILED, now)
    if outcome.kind == "unexecutable":
        failure = {"last_failure_kind": "infra", "last_failure_reason": outcome.reason}
        started_non_idempotent = not ti.idempotent and ti.user_code_started
        if started_non_idempotent or ti.infra_attempts >= ti.max_infra_attempts:
            return settled(session, move(states.INFRA_FAIL, ended_at=now, **failure), states.INFRA_FAILED, now)
        return move_to_wait(states.REPLACE_AFTER_INFRA_FAULT, infra_attempts=ti.infra_attempts + 1,
                            next_eligible_at=now + backoff.delay(ti.infra_attempts), **NEW_EXECUTION, **failure)
    return move_to_wait(states.RESCHEDULE, next_eligible_at=outcome.reschedule_at, last_heartbeat_at=None)


def requeue(*, session: Session, ti: TaskInstance) -> TaskInstance | None:
    """queued -> scheduled, same try, new epoch, no infra budget spent: a worker hands back a
    claim whose user code never started."""
    moved = cas(session, ti, states.REQUEUE, next_eligible_at=None, **NEW_EXECUTION)
    if moved is not None:
        announce(session, count=1, queue=moved.queue)
    return moved


# --- the success hot path: one guarded statement ---------------------------------------------

# What settle_success answers of the row: everything but the payload and the graph.
SETTLED_COLUMNS = tuple(c for c in TI.c if c.name not in ("payload", "upstream_task_ids"))
_SIBLING = TI.alias("sibling")

@cache
def _settling_success(dialect: Dialect, alongside: Alongside | None) -> Executable:
    """The success rail's one statement. It answers whether another task instance of the run is
    unfinished (under the run's lock every finisher of the run has committed, and a run with an
    unfinished task instance is running, so then the run's state stands). Where one statement may
    write several tables (PostgreSQL) the same statement announces the freed pool slot from its
    RETURNING (pg_notify for the row it moves), archives the try, and runs `alongside`;
    `alongside_done` says whether that changed a row (always false on SQLite, where the caller
    makes its change itself)."""
    others_unfinished = exists().where(_SIBLING.c.dag_run_id == TI.c.dag_run_id, _SIBLING.c.id != TI.c.id,
                                       ~one_of(_SIBLING.c.state, states.FINISHED))
    columns = [*SETTLED_COLUMNS, others_unfinished.label("others_unfinished")]
    if dialect.writes_in_ctes:
        columns.append(room_notification().label("room_announced"))
    else:
        columns.append(literal(False).label("alongside_done"))
    settle = (update(TI).where(TI.c.id == bindparam("key_ti"), TI.c.try_number == bindparam("key_try"),
                               TI.c.attempt_epoch == bindparam("key_epoch"), from_sources(states.SUCCEED))
              .values(**moved_to(states.SUCCEED, bindparam("now", type_=UTCDateTime())), ended_at=bindparam("now"))
              .returning(*columns))
    if not dialect.writes_in_ctes:
        return settle
    moved = settle.cte("settled")
    archive = archived(moved.c, bindparam("archive_id", type_=HISTORY.c.id.type),
                       literal(states.SUCCESS, HISTORY.c.state.type))
    done = exists(select(alongside(moved).c.id)) if alongside is not None else literal(False)
    return select(moved, done.label("alongside_done")).add_cte(archiving(dialect, archive).cte("archived"))


def settle_success(*, session: Session, ti_id: uuid.UUID, try_number: int, attempt_epoch: int,
                   now: datetime, alongside: Alongside | None = None,
                   params: Mapping[str, object] | None = None) -> Row | None:
    """The success rail for the attempt (ti_id, try_number, attempt_epoch) while it is in
    flight, in one guarded statement that the caller holds the run's lock for (lock_run_of).

    The try is archived, readiness judged for the task's downstream only, and the run settled
    when this was its last unfinished task instance. On PostgreSQL `alongside` (bound with
    `params`) runs in the same statement, after the row moved. None if the attempt is not the
    live one."""
    dialect = dialect_of(session)
    moved = session.execute(_settling_success(dialect, alongside), {
        "key_ti": ti_id, "key_try": try_number, "key_epoch": attempt_epoch, "now": now, "archive_id": uuid.uuid4(),
        **(params or {})}).first()
    if moved is not None:
        if not dialect.writes_in_ctes:
            announce_room(session)
            archive_try(session, moved, states.SUCCESS)
        if moved.has_downstream:
            ready_downstream(session, moved.dag_run_id, moved.task_id, now)
        elif not moved.others_unfinished:
            settle_run(session, moved.dag_run_id, now)
    return moved
