"""The report fence (contract 2.5): every agent write is checked against its attempt.

Settling or moving writes (running, an outcome, a hand-back) name an AttemptKey — from a
token, where a claim-less token settles only epoch 0, or from an observation — and match it
exactly. Heartbeats, log appends, the liveness read and renewal take the token itself: they
match try_number, and attempt_epoch only when the token carries it. A write that does not match
gets 409 stale-report with should_terminate and changes nothing.
"""

import uuid
from datetime import datetime
from functools import cache

from sqlalchemy import Integer, Row, Update, Uuid, bindparam, exists, or_, select, update
from sqlmodel import Session

from app.auth.attempt_key import ATTEMPT_FIELDS, AttemptKey
from app.auth.tokens import AttemptClaims, InvalidToken, KeyRing, renew_attempt
from app.db.dialect import Dialect, dialect_of
from app.db.statements import one_of
from app.db.types import utcnow
from app.errors import AppError, unauthorized
from app.execution.attempts import RELEASED, close_attempt, closing_success, ended_with, recording, update_attempt
from app.execution.schemas import Report
from app.orchestration import states
from app.orchestration.cas import TI, from_sources, read_task_instance
from app.orchestration.models import TaskInstance
from app.orchestration.outcomes import InfraBackoff, Outcome, requeue, settle_attempt
from app.orchestration.states import AttemptState

# What the fence reads of a row and answers: the attempt's identity and state, and the names
# a log stream is keyed by. Core rows, not ORM objects: these paths run on every agent write.
FENCE_COLUMNS = (TI.c.id, TI.c.state, *(TI.c[name] for name in ATTEMPT_FIELDS))


def stale_report(key: AttemptKey, ti: TaskInstance | None, *, epoch_claimed: bool = True) -> AppError:
    """The refusal of a write by an attempt that is not the live one (404 for no task instance)."""
    if ti is None:
        return AppError(404, "task-instance-not-found", "Task instance not found",
                        f"No task instance {key.ti_id}.", should_terminate=True)
    epoch = key.attempt_epoch if epoch_claimed else "absent"
    return AppError(
        409, "stale-report", "Stale report",
        f"Attempt (try {key.try_number}, epoch {epoch}) is not the live attempt of task instance {ti.id} "
        f"(try {ti.try_number}, epoch {ti.attempt_epoch}, state {ti.state}).",
        should_terminate=True, state=ti.state, try_number=ti.try_number, attempt_epoch=ti.attempt_epoch,
    )


# The statements of the agents' writes, built once with bound values: building one cost more
# than running it (docs/performance.md).
READ_FENCE_ROW = select(*FENCE_COLUMNS).where(TI.c.id == bindparam("ti_id"))
IS_ATTEMPT = (TI.c.id == bindparam("key_ti"), TI.c.try_number == bindparam("key_try"),
              TI.c.attempt_epoch == bindparam("key_epoch"))  # the settle rule, as a guard
START = (update(TI).where(*IS_ATTEMPT, from_sources(states.START))
         .values(state=states.START.target, updated_at=bindparam("now"), started_at=bindparam("now"),
                 last_heartbeat_at=bindparam("now"), user_code_started=True)
         .returning(*FENCE_COLUMNS))
# PostgreSQL: the start rail and the attempt record in one statement, answering whether the
# record was there to update (an attempt dispatched before the fence existed has none).
_STARTED = START.cte("started")
START_RECORDED = select(_STARTED, exists(select(recording(
    _STARTED, state=AttemptState.RUNNING, user_code_started=True, started_at=bindparam("now")).c.id)).label("recorded"))
# The heartbeat's guard: the token's try, and its epoch when it carries one (the relaxed rule).
STAMP_HEARTBEAT = {has_epoch: update(TI).where(TI.c.id == bindparam("key_ti"), TI.c.try_number == bindparam("key_try"),
                                    one_of(TI.c.state, states.IN_FLIGHT),
                                    *([TI.c.attempt_epoch == bindparam("key_epoch")] if has_epoch else []))
        .values(last_heartbeat_at=bindparam("now")).returning(*FENCE_COLUMNS)
        for has_epoch in (False, True)}


def _fence_row(session: Session, ti_id: uuid.UUID) -> Row | None:
    return session.execute(READ_FENCE_ROW, {"ti_id": ti_id}).first()


def _attempt(key: AttemptKey) -> dict[str, object]:
    return {"key_ti": key.ti_id, "key_try": key.try_number, "key_epoch": key.attempt_epoch}


def settled_by(key: AttemptKey, ti: TaskInstance | Row) -> bool:
    """The settle rule: `key` is the row's attempt, exactly."""
    return AttemptKey.of(ti) == key


def relaxed_match(token: AttemptClaims, ti: TaskInstance | Row) -> bool:
    """The relaxed rule: the token's try, and its epoch only when it carries one."""
    return ti.try_number == token.try_number and (not token.has_epoch or ti.attempt_epoch == token.attempt_epoch)


def _stale(token: AttemptClaims, ti: TaskInstance | Row | None) -> AppError:
    return stale_report(token.key, ti, epoch_claimed=token.has_epoch)


def live_attempt(session: Session, token: AttemptClaims) -> Row:
    """The task instance if the token's attempt is in flight under the relaxed rule."""
    ti = _fence_row(session, token.ti_id)
    if ti is None or not relaxed_match(token, ti) or ti.state not in states.IN_FLIGHT:
        raise _stale(token, ti)
    return ti


def current_attempt(session: Session, token: AttemptClaims) -> Row:
    """The task instance if the token's attempt is still its current one under the relaxed
    rule, finished or not (a log append may flush the last lines after the outcome)."""
    ti = _fence_row(session, token.ti_id)
    if ti is None or not relaxed_match(token, ti):
        raise _stale(token, ti)
    return ti


def renew(*, session: Session, token: AttemptClaims, keyring: KeyRing, ttl_seconds: int,
          max_lifetime_seconds: int) -> str:
    """A fresh token for a live attempt (relaxed rule), every claim preserved verbatim; 401 past
    the credential's lifetime ceiling."""
    live_attempt(session, token)
    try:
        return renew_attempt(keyring, token, ttl_seconds=ttl_seconds, max_lifetime_seconds=max_lifetime_seconds)
    except InvalidToken as exc:
        raise unauthorized(f"The token was refused: {exc}.") from exc


def heartbeat(*, session: Session, token: AttemptClaims, now: datetime | None = None) -> Row:
    """Stamp last_heartbeat_at on the live attempt (relaxed rule): one guarded statement."""
    values = {"key_ti": token.ti_id, "key_try": token.try_number, "key_epoch": token.attempt_epoch,
              "now": now or utcnow()}
    ti = session.execute(STAMP_HEARTBEAT[token.has_epoch], values).first()
    if ti is None:
        raise _stale(token, _fence_row(session, token.ti_id))
    return ti


# A batch's heartbeats: one guarded statement for them all, joined on the tokens' (ti, try,
# epoch) rows, where a claim-less token's epoch is null and its try alone matches, as in
# STAMP_HEARTBEAT. Built once per dialect, the rows sent as bound values (Dialect.rows_table).
TOKEN_ROWS = (("ti", Uuid), ("try_number", Integer), ("epoch", Integer))
READ_FENCE_ROWS = select(*FENCE_COLUMNS).where(TI.c.id.in_(bindparam("ids", expanding=True)))


@cache
def _stamp_heartbeats(dialect: Dialect) -> Update:
    tokens = dialect.rows_table("tokens", TOKEN_ROWS)
    return (update(TI).where(dialect.among_rows(TI.c.id, "tokens", TOKEN_ROWS),
                             TI.c.id == tokens.c.ti, TI.c.try_number == tokens.c.try_number,
                             or_(tokens.c.epoch.is_(None), TI.c.attempt_epoch == tokens.c.epoch),
                             one_of(TI.c.state, states.IN_FLIGHT))
            .values(last_heartbeat_at=bindparam("now")).returning(*FENCE_COLUMNS))


def heartbeats(*, session: Session, tokens: list[AttemptClaims], now: datetime | None = None) -> list[Row | AppError]:
    """heartbeat() for each of `tokens` in one guarded statement: each one's stamped row, or the
    refusal its single heartbeat would get (read in one more statement)."""
    dialect = dialect_of(session)
    rows = dialect.rows_values("tokens", TOKEN_ROWS, [(t.ti_id, t.try_number, t.attempt_epoch) for t in tokens])
    stamped = {row.id: row for row in session.execute(_stamp_heartbeats(dialect), {**rows, "now": now or utcnow()})}
    missed = {t.ti_id for t in tokens if t.ti_id not in stamped or not relaxed_match(t, stamped[t.ti_id])}
    current = {row.id: row for row in session.execute(READ_FENCE_ROWS, {"ids": list(missed)})} if missed else {}
    return [row if (row := stamped.get(t.ti_id)) is not None and relaxed_match(t, row)
            else _stale(t, current.get(t.ti_id)) for t in tokens]


def report(*, session: Session, key: AttemptKey, body: Report, backoff: InfraBackoff,
           now: datetime | None = None, run_locked: bool = False) -> TaskInstance | Row:
    """Apply a report on attempt `key` under the settle rule and close the attempt's record. A
    report already applied to this very attempt (a journaled outcome re-delivered) answers as
    before. `run_locked`: the caller holds the run's lock (a batch locks its outcomes' runs first)."""
    now = now or utcnow()
    if body.state == "running":
        return _start(session, key, now)
    outcome = Outcome(body.state, body.reason, body.reschedule_at)
    # In the lock order of every settling path: the run, the task instance, then the attempt record.
    moved = settle_attempt(session=session, key=key, outcome=outcome, backoff=backoff, now=now,
                           run_locked=run_locked, alongside=closing_success, params={"close_reason": outcome.reason})
    if moved is None:
        return _applied_before(session, key, outcome)
    # PostgreSQL closes a success's record in the rail's own statement; close_attempt also makes
    # the record an attempt dispatched before the fence existed lacks.
    if not (outcome.kind == "success" and moved.alongside_done):
        close_attempt(session, key, outcome, now)
    return moved


def _applied_before(session: Session, key: AttemptKey, outcome: Outcome) -> Row:
    """The row of attempt `key` if it already ended with `outcome`; otherwise its refusal."""
    ti = _fence_row(session, key.ti_id)
    if (ti is not None and settled_by(key, ti) and ti.state not in states.IN_FLIGHT
            and ended_with(session, key, outcome)):
        return ti
    raise stale_report(key, ti)


def writes_in_one_statement(session: Session, body: Report) -> bool:
    """Whether the report is one guarded statement, refused (if at all) before it writes, that
    binds no agent value a column could refuse: `running`, and `success` without a reason, on
    PostgreSQL, where one statement writes the task instance and its attempt record.

    A batch applies such an entry without a savepoint, which would cost two round trips more
    than the work."""
    return (body.state == "running" or (body.state == "success" and body.reason is None)) \
        and dialect_of(session).writes_in_ctes


def _start(session: Session, key: AttemptKey, now: datetime) -> Row:
    """queued -> running (the start rail) in one guarded statement, then the attempt record;
    `running` repeated for an attempt already running answers as before. On PostgreSQL the
    record moves in the same statement."""
    together = dialect_of(session).writes_in_ctes
    moved = session.execute(START_RECORDED if together else START, {**_attempt(key), "now": now}).first()
    if moved is None:
        ti = _fence_row(session, key.ti_id)
        if ti is not None and settled_by(key, ti) and ti.state == states.RUNNING:
            return ti
        raise stale_report(key, ti)
    if not (together and moved.recorded):
        update_attempt(session, key, state=AttemptState.RUNNING, user_code_started=True, started_at=now)
    return moved


def release(*, session: Session, key: AttemptKey) -> TaskInstance:
    """Hand back a claim whose user code never started (settle rule): requeued on a new epoch,
    spending neither a try nor the infra budget."""
    ti = read_task_instance(session, key.ti_id)
    if ti is None or not settled_by(key, ti):
        raise stale_report(key, ti)
    if ti.state != states.QUEUED:
        # Still the live attempt, so not stale: but its user code started (or it ended), and
        # a started attempt ends only with an outcome.
        raise AppError(409, "attempt-started", "Attempt started",
                       f"Attempt of task instance {ti.id} is {ti.state}; only a queued claim can be released.",
                       should_terminate=False, state=ti.state)
    moved = requeue(session=session, ti=ti)
    if moved is None:
        raise stale_report(key, read_task_instance(session, key.ti_id))
    close_attempt(session, key, RELEASED, utcnow())
    return moved
