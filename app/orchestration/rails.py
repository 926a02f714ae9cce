"""The named rails: every transition a task instance can make, each one compare-and-swap.

The rail table (states.py) says where each rail may move a row from and to. Every rail that
can start a new execution (retry, clear, clear-all-failed, infra re-place, reschedule
re-dispatch, requeue, the claim in execution/dispatch.py) bumps `attempt_epoch` and clears
`last_heartbeat_at` in the same statement, so nothing a superseded attempt does can settle,
heartbeat for, or outlive its replacement.

Each CAS is guarded on `(id, state, try_number, attempt_epoch)` as read from the candidate and
on the rail's source states: `None` means the row moved and the caller lost the race.

Every rail that makes a task instance claimable, now or at a later `next_eligible_at`,
announces it (on its queue) in the same transaction (app/orchestration/events.py), so waiting claims wake
on commit; every move out of queued or running announces the pool slot and tenant place it
frees.
"""

import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any, Literal

from sqlalchemy import (
    CTE,
    ColumnElement,
    Executable,
    Row,
    Update,
    bindparam,
    case,
    exists,
    func,
    literal,
    null,
    select,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlmodel import Session

from app.db.dialect import dialect_of
from app.db.statements import insert_ignore, one_of
from app.db.types import UTCDateTime, utcnow
from app.orchestration import states as s
from app.orchestration.events import announce, announce_queues, announce_room, room_notification
from app.orchestration.models import DagRun, TaskInstance, TaskInstanceHistory
from app.orchestration.states import Rail

# The tables, for the statements of the hot paths: plain Core, without the ORM's per-statement
# bookkeeping (identity map, bulk-update evaluation), which those paths do not need.
TI, RUNS, HISTORY = TaskInstance.__table__, DagRun.__table__, TaskInstanceHistory.__table__


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


# What a new execution attempt starts without: the previous one's worker and start.
NEW_EXECUTION = {"execution_id": None, "user_code_started": False, "started_at": None}
# What a cleared try, or one marked success, shows of failures: none (the archived tries and
# the attempt records keep the history).
NO_FAILURE = {"last_failure_kind": None, "last_failure_reason": None}


def from_sources(rail: Rail) -> ColumnElement[bool]:
    """The guard every statement of `rail` carries: the row is in one of its source states."""
    return one_of(TI.c.state, sorted(rail.sources))  # a set: sorted, so every process writes the same statement


def moved_to(rail: Rail, now: datetime) -> dict[str, Any]:
    """What every statement of `rail` sets: its target state and, for a rail that starts a new
    execution attempt, a new epoch without the old one's heartbeat."""
    values: dict[str, Any] = {"state": rail.target, "updated_at": now}
    if rail.new_epoch:
        values.update(attempt_epoch=TI.c.attempt_epoch + 1, last_heartbeat_at=None)
    return values


def cas(session: Session, ti: TaskInstance, rail: Rail, now: datetime | None = None, *,
        within: Rail | None = None, **values: Any) -> TaskInstance | None:
    """Move `ti` along `rail` from the state, try and epoch it was read with; None if it moved
    since, or if that state is not one of the rail's sources (nor of `within`'s, when given)."""
    guards = [from_sources(rail)] if within is None else [from_sources(rail), from_sources(within)]
    moved = session.execute(
        update(TaskInstance)
        .where(
            TaskInstance.id == ti.id,
            TaskInstance.state == ti.state,
            TaskInstance.try_number == ti.try_number,
            TaskInstance.attempt_epoch == ti.attempt_epoch,
            *guards,
        )
        .values(**moved_to(rail, now or utcnow()), **values)
        .returning(TaskInstance)
        .execution_options(populate_existing=True, synchronize_session=False)
    ).scalar_one_or_none()
    if moved is not None and ti.state in s.IN_FLIGHT and rail.target not in s.IN_FLIGHT:
        announce_room(session)
    return moved


# What a try's archive copies of the row as it is, beside its key and the state it archives
# (archive_try; on PostgreSQL also the success rail's statement).
ARCHIVED = ("infra_attempts", "last_failure_kind", "last_failure_reason", "execution_id", "queued_at", "started_at",
            "ended_at")
ARCHIVE_KEY = ("task_instance_id", "try_number")  # a try is archived once


def archive_try(session: Session, ti: TaskInstance | Row, state: str) -> None:
    """Record a finished try once; a second archive of the same try does nothing."""
    insert_ignore(session, TaskInstanceHistory, {
        "id": uuid.uuid4(), "task_instance_id": ti.id, "try_number": ti.try_number,
        "attempt_epoch": ti.attempt_epoch, "state": state, **{name: getattr(ti, name) for name in ARCHIVED},
    }, [*ARCHIVE_KEY])


def _settled(session: Session, ti: TaskInstance | None, archived_state: str | None,
             now: datetime) -> TaskInstance | None:
    if ti is not None:
        if archived_state is not None:
            archive_try(session, ti, archived_state)
        if ti.state in s.FINISHED:
            refresh_run(session, ti.dag_run_id, now)
    return ti


def apply_outcome(
    *, session: Session, ti: TaskInstance, outcome: Outcome, backoff: Backoff, now: datetime | None = None,
    within: Rail | None = None, locked: bool = False,
) -> TaskInstance | None:
    """Route one attempt's outcome from the state `ti` was read in.

    success ends the try; failed (application) spends it: up_for_retry while try_number <=
    max_tries, else failed; unexecutable (infra) re-places the same try on the back-off budget
    and ends in infra_failed when the budget is spent, or at once for a non-idempotent task
    whose user code started; rescheduled waits for reschedule_at on the same try.
    `within`, a reaper's mark, narrows the states the outcome may be applied from; `locked`
    says the caller holds the run's lock already. None if the attempt was superseded meanwhile.
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
        return _settled(session, move(s.SUCCEED, ended_at=now), s.SUCCESS, now)
    if outcome.kind == "failed":
        failure = {"last_failure_kind": "app", "last_failure_reason": outcome.reason, "ended_at": now}
        if ti.try_number <= ti.max_tries:
            retry_at = now + timedelta(seconds=ti.retry_delay_seconds)
            return _settled(session, move_to_wait(s.FAIL_FOR_RETRY, next_eligible_at=retry_at, **failure),
                            s.FAILED, now)
        return _settled(session, move(s.FAIL, **failure), s.FAILED, now)
    if outcome.kind == "unexecutable":
        failure = {"last_failure_kind": "infra", "last_failure_reason": outcome.reason}
        started_non_idempotent = not ti.idempotent and ti.user_code_started
        if started_non_idempotent or ti.infra_attempts >= ti.max_infra_attempts:
            return _settled(session, move(s.INFRA_FAIL, ended_at=now, **failure), s.INFRA_FAILED, now)
        return move_to_wait(s.REPLACE_AFTER_INFRA_FAULT, infra_attempts=ti.infra_attempts + 1,
                            next_eligible_at=now + backoff.delay(ti.infra_attempts), **NEW_EXECUTION, **failure)
    return move_to_wait(s.RESCHEDULE, next_eligible_at=outcome.reschedule_at, last_heartbeat_at=None)


def requeue(*, session: Session, ti: TaskInstance) -> TaskInstance | None:
    """queued -> scheduled, same try, new epoch, no infra budget spent: a worker hands back a
    claim whose user code never started."""
    moved = cas(session, ti, s.REQUEUE, next_eligible_at=None, **NEW_EXECUTION)
    if moved is not None:
        announce(session, count=1, queue=moved.queue)
    return moved


# The time-driven rails, and what each sets beyond its rail: reset_for_retry starts the next
# try on a fresh infra budget; redispatch_after_reschedule keeps the try.
PROMOTIONS: dict[Rail, dict[str, Any]] = {
    s.RESET_FOR_RETRY: {"try_number": TI.c.try_number + 1, "infra_attempts": 0, "ended_at": None,
                        "queued_at": None},
    s.REDISPATCH_AFTER_RESCHEDULE: {},
}


@cache
def _promoting(skip_locked: bool, rail: Rail | None) -> Update:
    rails = list(PROMOTIONS) if rail is None else [rail]
    sources = sorted(set().union(*(r.sources for r in rails)))
    now = bindparam("now", type_=UTCDateTime())
    due = select(TI.c.id).where(one_of(TI.c.state, sources), TI.c.next_eligible_at <= now)
    if skip_locked:
        due = due.with_for_update(skip_locked=True)
    by_state = {column: case(*((from_sources(r), PROMOTIONS[r][column]) for r in rails if column in PROMOTIONS[r]),
                             else_=TI.c[column])
                for column in {column for r in rails for column in PROMOTIONS[r]}}
    return (update(TI).where(TI.c.id.in_(due), one_of(TI.c.state, sources))
            .values(**moved_to(rails[0], now), next_eligible_at=None, **NEW_EXECUTION, **by_state)
            .returning(TI.c.queue))


def promote(*, session: Session, now: datetime, skip_locked: bool, rail: Rail | None = None) -> None:
    """Take the time-driven `rail`, or every one (up_for_retry or up_for_reschedule -> scheduled,
    new epoch), for every row whose wait is over, in one statement (built once): what each
    rail sets beyond the others is chosen by the row's state (they share their target and a
    new epoch, so moved_to is alike). Rows another transaction holds are skipped, not waited for."""
    announce_queues(session, session.execute(_promoting(skip_locked, rail), {"now": now}).scalars().all())


def promote_eligible(*, session: Session, now: datetime, skip_locked: bool) -> None:
    """Every time-driven rail whose wait is over."""
    promote(session=session, now=now, skip_locked=skip_locked)


WAITING_STATES = (s.SCHEDULED, s.UP_FOR_RETRY, s.UP_FOR_RESCHEDULE)


def next_eligible_at(*, session: Session, now: datetime) -> datetime | None:
    """The earliest time after `now` at which a waiting task instance (a retry, a reschedule,
    an infra re-place backing off) becomes claimable: the wake-up timer's next time."""
    return session.execute(
        select(func.min(TaskInstance.next_eligible_at))
        .where(TaskInstance.state.in_(WAITING_STATES), TaskInstance.next_eligible_at > now)
    ).scalar_one()


def clear(*, session: Session, ti: TaskInstance, rail: Rail = s.CLEAR,
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
    if ti.state in s.IN_FLIGHT or ti.state == s.UP_FOR_RESCHEDULE:
        archive_try(session, ti, s.FAILED)
    next_try = ti.try_number if ti.state == s.UPSTREAM_FAILED else ti.try_number + 1
    cleared = cas(
        session, ti, rail, now, try_number=next_try, max_tries=next_try - 1 + ti.retries,
        infra_attempts=0, next_eligible_at=None, queued_at=None, ended_at=None, **NO_FAILURE, **NEW_EXECUTION,
    )
    if cleared is None:
        return None
    refresh_run(session, cleared.dag_run_id, now, reopen=True)
    return session.get(TaskInstance, cleared.id, populate_existing=True)  # readiness may have scheduled it


def mark(*, session: Session, ti: TaskInstance, state: s.State, now: datetime | None = None) -> TaskInstance | None:
    """An operator's verdict: -> success or failed, new epoch (any in-flight worker is told to
    terminate), try archived. Success shows no failure; failed records an application failure
    with reason `marked_failed`."""
    now = now or utcnow()
    if ti.state == state:
        return ti
    lock_run(session, ti.dag_run_id)
    if state == s.SUCCESS:
        rail, failure = s.MARK_SUCCESS, NO_FAILURE
    else:
        rail, failure = s.MARK_FAILED, {"last_failure_kind": "app", "last_failure_reason": "marked_failed"}
    marked = cas(session, ti, rail, now, ended_at=now, next_eligible_at=None, **failure)
    return _settled(session, marked, state, now)


# --- the run: one lock order, and readiness --------------------------------------------------

def lock_run(session: Session, dag_run_id: uuid.UUID) -> None:
    """Lock the run's row. Every path that settles, clears or marks a task instance takes it
    before the task instance's row: one lock order, so those paths queue on the run and never
    deadlock, also against a reaper sweep that holds a run across several marks."""
    session.execute(select(RUNS.c.id).where(RUNS.c.id == dag_run_id).with_for_update()).scalar_one()


LOCK_RUN_OF = (select(RUNS.c.id).where(RUNS.c.id == select(TI.c.dag_run_id).where(TI.c.id == bindparam("ti_id"))
                                       .scalar_subquery()).with_for_update())


def lock_run_of(session: Session, ti_id: uuid.UUID) -> bool:
    """Lock the run of task instance `ti_id` (lock_run) without reading the task instance
    first; False if there is no such task instance."""
    return session.execute(LOCK_RUN_OF, {"ti_id": ti_id}).first() is not None


# What settle_success answers of the row: everything but the payload and the graph.
SETTLED_COLUMNS = tuple(c for c in TI.c if c.name not in ("payload", "upstream_task_ids"))
_SIBLING = TI.alias("sibling")
# The success path's statements, built once with bound values (building one cost more than
# running it).
WAITING = select(TI.c.id, TI.c.upstream_task_ids).where(TI.c.dag_run_id == bindparam("run"), TI.c.state == s.NONE)
UPSTREAM_STATES = select(TI.c.task_id, TI.c.state).where(TI.c.dag_run_id == bindparam("run"),
                                                         TI.c.task_id.in_(bindparam("tasks", expanding=True)))
MAKE_READY = (update(TI).where(TI.c.id.in_(bindparam("ids", expanding=True)), from_sources(s.READY))
              .values(**moved_to(s.READY, bindparam("now", type_=UTCDateTime()))).returning(TI.c.queue))
_OF_RUN = TI.c.dag_run_id == bindparam("run")
_UNFINISHED, _UNSUCCESSFUL = exists().where(_OF_RUN, TI.c.state.not_in(s.FINISHED)), \
    exists().where(_OF_RUN, TI.c.state != s.SUCCESS)
SETTLE_RUN = update(RUNS).where(RUNS.c.id == bindparam("run")).values(
    state=case((_UNFINISHED, "running"), (_UNSUCCESSFUL, s.FAILED), else_=s.SUCCESS),
    ended_at=case((_UNFINISHED, null()), else_=bindparam("now", type_=UTCDateTime())),
    updated_at=bindparam("now", type_=UTCDateTime()))


# A statement of the caller's that rides on the row settle_success moves (PostgreSQL): given the
# CTE of the moved row, a data-modifying CTE answering the ids of the rows it changed. Pass a
# module-level function: the statement is built once per function (functools.cache).
Alongside = Callable[[CTE], CTE]


@cache
def _settling_success(together: bool, alongside: Alongside | None) -> Executable:
    """The success rail's one statement. It answers whether another task instance of the run is
    unfinished (under the run's lock every finisher of the run has committed, and a run with an
    unfinished task instance is running, so then the run's state stands). On PostgreSQL the
    same statement announces the freed pool slot from its RETURNING (pg_notify for the row it
    moves), archives the try, and runs `alongside`; `alongside_done` says whether that
    changed a row (always false on SQLite, where the caller makes its change itself)."""
    others_unfinished = exists().where(_SIBLING.c.dag_run_id == TI.c.dag_run_id, _SIBLING.c.id != TI.c.id,
                                       _SIBLING.c.state.not_in(s.FINISHED))
    columns = [*SETTLED_COLUMNS, others_unfinished.label("others_unfinished")]
    if together:
        columns.append(room_notification().label("room_announced"))
    else:
        columns.append(literal(False).label("alongside_done"))
    settle = (update(TI).where(TI.c.id == bindparam("key_ti"), TI.c.try_number == bindparam("key_try"),
                               TI.c.attempt_epoch == bindparam("key_epoch"), from_sources(s.SUCCEED))
              .values(**moved_to(s.SUCCEED, bindparam("now", type_=UTCDateTime())), ended_at=bindparam("now"))
              .returning(*columns))
    if not together:
        return settle
    settled = settle.cte("settled")
    archived = (postgresql.insert(HISTORY).from_select(
        ["id", "task_instance_id", "try_number", "attempt_epoch", "state", *ARCHIVED],
        select(bindparam("archive_id", type_=HISTORY.c.id.type), settled.c.id, settled.c.try_number,
               settled.c.attempt_epoch, literal(s.SUCCESS, HISTORY.c.state.type),
               *(settled.c[name] for name in ARCHIVED)))
        .on_conflict_do_nothing(index_elements=ARCHIVE_KEY).cte("archived"))
    done = exists(select(alongside(settled).c.id)) if alongside is not None else literal(False)
    return select(settled, done.label("alongside_done")).add_cte(archived)


def settle_success(*, session: Session, ti_id: uuid.UUID, try_number: int, attempt_epoch: int,
                   now: datetime, alongside: Alongside | None = None,
                   params: Mapping[str, object] | None = None) -> Row | None:
    """The success rail for the attempt (ti_id, try_number, attempt_epoch) while it is in
    flight, in one guarded statement; the try archived, readiness judged for the task's
    downstream only (none for a task nothing waits on), and the run's state settled when this
    was its last unfinished task instance. The caller holds the run's lock (lock_run_of). On
    PostgreSQL `alongside` (with the values of its `params`) runs in the same statement, after
    the row moved. None if the attempt is not the live one."""
    together = dialect_of(session).writes_in_ctes
    moved = session.execute(_settling_success(together, alongside), {
        "key_ti": ti_id, "key_try": try_number, "key_epoch": attempt_epoch, "now": now, "archive_id": uuid.uuid4(),
        **(params or {})}).first()
    if moved is not None:
        if not together:
            announce_room(session)
            archive_try(session, moved, s.SUCCESS)
        if moved.has_downstream:
            ready_downstream(session, moved.dag_run_id, moved.task_id, now)
        elif not moved.others_unfinished:
            session.execute(SETTLE_RUN, {"run": moved.dag_run_id, "now": now})
    return moved


def ready_downstream(session: Session, dag_run_id: uuid.UUID, task_id: str, now: datetime) -> None:
    """Readiness after `task_id` succeeded, under the run's lock: only waiting tasks downstream
    of it can change, so only they are judged (with their upstreams' states), and the run's
    state is settled in one statement; not O(tasks in the run) in Python. A downstream task
    that would turn upstream_failed (a failure the full judgement had not yet propagated)
    falls back to refresh_run."""
    waiting = session.execute(WAITING, {"run": dag_run_id}).all()
    downstream = [row for row in waiting if task_id in row.upstream_task_ids]
    if downstream:
        upstream_states: dict[str, list[str]] = {}
        tasks = sorted({t for d in downstream for t in d.upstream_task_ids})
        for row in session.execute(UPSTREAM_STATES, {"run": dag_run_id, "tasks": tasks}):
            upstream_states.setdefault(row.task_id, []).append(row.state)
        ready = []
        for row in downstream:
            upstream = [st for task in row.upstream_task_ids for st in upstream_states.get(task, [])]
            if any(st in s.FAILED_STATES for st in upstream):
                refresh_run(session, dag_run_id, now)
                return
            if all(st == s.SUCCESS for st in upstream):
                ready.append(row.id)
        if ready:
            announce_queues(session, session.execute(MAKE_READY, {"ids": ready, "now": now}).scalars().all())
    session.execute(SETTLE_RUN, {"run": dag_run_id, "now": now})


def refresh_run(session: Session, dag_run_id: uuid.UUID, now: datetime, *, reopen: bool = False) -> None:
    """Readiness and the run's state, after a task instance finished (or was cleared).

    Under the run's lock, two upstreams finishing at once are judged one after the other and
    the second always sees the first: a downstream task is never left waiting.
    Waiting tasks whose upstreams all succeeded become scheduled; those with a failed upstream
    become upstream_failed; with `reopen`, upstream_failed tasks wait again.
    """
    lock_run(session, dag_run_id)
    if reopen:
        session.execute(update(TaskInstance)
                        .where(TaskInstance.dag_run_id == dag_run_id, from_sources(s.REOPEN))
                        .values(**moved_to(s.REOPEN, now)).execution_options(synchronize_session=False))
    # Only what readiness needs, not whole rows: this runs on every finished task instance.
    rows = session.execute(
        select(TaskInstance.id, TaskInstance.task_id, TaskInstance.state, TaskInstance.upstream_task_ids)
        .where(TaskInstance.dag_run_id == dag_run_id)).all()
    stored = {row.id: row.state for row in rows}
    state = dict(stored)
    by_task: dict[str, list[uuid.UUID]] = {}
    for row in rows:
        by_task.setdefault(row.task_id, []).append(row.id)
    changed = True
    while changed:  # upstream_failed propagates down the graph
        changed = False
        for row in rows:
            if state[row.id] != s.NONE:
                continue
            upstream = [state[u] for task in row.upstream_task_ids for u in by_task.get(task, [])]
            if any(st in s.FAILED_STATES for st in upstream):
                state[row.id], changed = s.UPSTREAM_FAILED, True
            elif all(st == s.SUCCESS for st in upstream):
                state[row.id], changed = s.SCHEDULED, True
    for rail in (s.READY, s.UPSTREAM_FAIL):
        moved = [ti_id for ti_id, st in state.items() if st == rail.target and stored[ti_id] != rail.target]
        if moved:
            queues = session.execute(update(TI).where(TI.c.id.in_(moved), from_sources(rail))
                                     .values(**moved_to(rail, now)).returning(TI.c.queue)).scalars().all()
            if rail is s.READY:
                announce_queues(session, queues)
    finals = set(state.values())
    if finals <= set(s.FINISHED):
        run_state, ended = (s.SUCCESS if finals == {s.SUCCESS} else s.FAILED), now
    else:
        run_state, ended = "running", None
    session.execute(update(DagRun).where(DagRun.id == dag_run_id)
                    .values(state=run_state, ended_at=ended, updated_at=now)
                    .execution_options(synchronize_session=False))
