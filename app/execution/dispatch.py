"""Claims: an admitted execution takes ready work, each row claiming a new attempt epoch."""

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from sqlalchemy import Connection, Row, bindparam, exists, select, update
from sqlmodel import Session

from app.auth.attempt_key import ATTEMPT_FIELDS
from app.db.dialect import Dialect, dialect_of
from app.db.types import UTCDateTime, utcnow
from app.errors import AppError
from app.execution.attempts import open_attempts, opening
from app.identity.models import Execution
from app.orchestration import states
from app.orchestration.cas import NEW_EXECUTION, RUNS, TI, from_sources, moved_to
from app.orchestration.promotion import promote_eligible
from app.orchestration.routes import DEFAULT_QUEUE
from app.routing import selection

EXECUTIONS = Execution.__table__


# The execution a claim is made for may claim: admitted, not superseded, not observed terminal.
CURRENT = select(EXECUTIONS.c.superseded_by, EXECUTIONS.c.obs_terminal).where(
    EXECUTIONS.c.execution_id == bindparam("execution_id"))
IS_CURRENT = exists().where(EXECUTIONS.c.execution_id == bindparam("claimer"),
                            EXECUTIONS.c.superseded_by.is_(None), EXECUTIONS.c.obs_terminal.is_not(True))


def _require_current(execution_id: uuid.UUID, execution: Row | None) -> None:
    """The claiming execution must be admitted, not superseded and not observed terminal: a
    superseded execution's worker token claims nothing. 409 stale-execution otherwise."""
    if execution is None or execution.superseded_by is not None or execution.obs_terminal:
        why = "is unknown" if execution is None else (
            f"was superseded by {execution.superseded_by}" if execution.superseded_by else "was observed terminal")
        raise AppError(409, "stale-execution", "Stale execution", f"Execution {execution_id} {why}.",
                       should_terminate=True)


def require_current_execution(session: Session, execution_id: uuid.UUID) -> None:
    _require_current(execution_id, session.execute(CURRENT, {"execution_id": execution_id}).first())


@cache
def _look(queue_count: int) -> Any:
    """A claim's first look, one read: whether its execution may claim, and whether anything is
    ready on its `queue_count` queues."""
    return (select(EXECUTIONS.c.superseded_by, EXECUTIONS.c.obs_terminal,
                   selection.any_ready(queue_count).label("ready"))
            .where(EXECUTIONS.c.execution_id == bindparam("execution_id")))


def work_ready(*, session: Session | Connection, execution_id: uuid.UUID, queues: Sequence[str],
               now: datetime | None = None) -> bool:
    """Whether a claim by `execution_id` on `queues` may find ready work now (409
    stale-execution if it may not claim), in one read that locks nothing: an idle fleet's
    claims end here, and so take no write lock and open no transaction that writes (a bare
    connection does, and an ORM session's bookkeeping would be a tenth of an empty claim). Work whose
    wait is over but that no claim has made ready yet is not seen: a caller that knows some
    may be due claims without looking (claim's `promote`)."""
    execution = session.execute(_look(len(queues)), {"execution_id": execution_id,
                                                     **selection.params(queues, now or utcnow())}).first()
    _require_current(execution_id, execution)
    return bool(execution.ready)


# What a claim answers of each claimed row: its WorkItem's payload and correlation (the run's
# tenant is copied on the task instance; its trace is read in the same statement).
CLAIMED_COLUMNS = (TI.c.id, TI.c.dag_run_id, *(TI.c[name] for name in ATTEMPT_FIELDS), TI.c.payload,
                   TI.c.execution_id, TI.c.tenant_id,
                   select(RUNS.c.trace_id).where(RUNS.c.id == TI.c.dag_run_id).scalar_subquery().label("trace_id"))
_NOW = bindparam("now", type_=UTCDateTime())


def _claiming(chosen: Any) -> Any:
    """The claim rail for the `chosen` rows, only while the claiming execution is current (the
    same check as require_current_execution, in the statement that claims)."""
    return (update(TI).where(chosen, from_sources(states.CLAIM), IS_CURRENT)
            .values(**moved_to(states.CLAIM, _NOW), queued_at=_NOW, next_eligible_at=None,
                    **{**NEW_EXECUTION, "execution_id": bindparam("claimer")})
            .returning(*CLAIMED_COLUMNS))


CLAIM = _claiming(TI.c.id.in_(bindparam("ids", expanding=True)))


@cache
def _claiming_one(queue_count: int, capped: bool, dialect: Dialect) -> Any:
    """The claim of one task: its choice (selection.first_choice) and its claim, one statement;
    where one statement may write several tables (PostgreSQL) its tenant's turn and its attempt
    record too, which read the claimed row (so its lock comes first)."""
    claim = _claiming(TI.c.id == selection.first_choice(queue_count, capped))
    if not dialect.writes_in_ctes:
        return claim
    claimed = claim.cte("claimed")
    return select(claimed).add_cte(selection.taking_turn(claimed, dialect), opening(claimed))


@dataclass(frozen=True)
class Claimed:
    """What a claim took (Core rows, each carrying its run's tenant and trace), and, when it took
    nothing, whether ready work on its queues was there that a pool or a cap held back."""

    rows: list[Row]
    held_back: bool = False


def claim(*, session: Session, execution_id: uuid.UUID, limit: int, queues: Sequence[str] = (DEFAULT_QUEUE,),
          now: datetime | None = None, promote: bool = True) -> Claimed:
    """scheduled -> queued (the claim rail) for up to `limit` ready task instances on `queues`,
    chosen by the routing rules (app/routing/selection.py: priority, tenant turns and caps,
    pool slots), then one guarded UPDATE … RETURNING that bumps attempt_epoch, clears
    last_heartbeat_at and binds the execution. Claims that may take from the same pool run one
    after the other (the pool rows' lock on PostgreSQL; SQLite serialises writers), so two
    claimers never get the same task instance nor overfill a pool. 409 stale-execution for an
    execution that may not claim. With `promote`, time-driven work whose wait is over is made
    ready first, in the same transaction (for a caller alone on the database: a server's claims
    promote in a transaction of their own, promote_due)."""
    if promote:
        promote_due(session, now)
    (claimed,) = claim_each(session=session, claims=[(execution_id, limit)], queues=queues, now=now)
    if isinstance(claimed, AppError):
        raise claimed
    return claimed


def promote_due(session: Session, now: datetime | None = None) -> None:
    """The time-driven rails whose wait is over, as a claim takes them first: in a transaction of
    their own, which holds no other lock (claims.Claims._promote)."""
    promote_eligible(session=session, now=now or utcnow(), skip_locked=not dialect_of(session).writers_take_turns)


def claim_each(*, session: Session, claims: Sequence[tuple[uuid.UUID, int]], queues: Sequence[str],
               now: datetime | None = None) -> list[Claimed | AppError]:
    """claim() for each (execution_id, limit) of `claims` in turn, in one transaction: the pools'
    lock once for all, then each claim as if it were made on
    its own right after the one before (it sees their tenant turns and their pool slots taken).
    Answers each claim's Claimed, or its refusal (409 stale-execution), in order; one claim's
    refusal changes nothing for the others."""
    now, dialect = now or utcnow(), dialect_of(session)
    routes = selection.lock_routes(session, queues, now)
    if len(claims) > 1:
        selection.hold_turns(session)  # each claim of one takes its tenant's turn: not in tenant order
    answers: list[Claimed | AppError] = []
    nothing = None if routes is not None else Claimed([])  # once a claim found nothing: what it answered
    for n, (execution_id, limit) in enumerate(claims):
        at = now + timedelta(microseconds=n)  # each claim's own time: its turn comes after the one before's
        try:
            if nothing is not None:  # an earlier claim found nothing: neither can this one (it would choose the same)
                require_current_execution(session, execution_id)
                answers.append(Claimed([], held_back=nothing.held_back))
                continue
            claimed = _claim_held(session, routes, execution_id, limit, queues, at, dialect)
        except AppError as refusal:
            answers.append(refusal)
            continue
        if not claimed.rows:
            nothing = claimed
        answers.append(claimed)
    return answers


def _claim_held(session: Session, routes: selection.Routes, execution_id: uuid.UUID, limit: int,
                queues: Sequence[str], now: datetime, dialect: Dialect) -> Claimed:
    """One claim, its pools already locked (`routes`)."""
    claimer = {"now": now, "claimer": execution_id}
    if limit == 1:
        claimed = session.execute(_claiming_one(len(queues), routes.capped, dialect),
                                  {**selection.params(queues, now, routes, 1), **claimer, "attempt_id": uuid.uuid4()}
                                  ).all()
    else:  # the choice first (its cut to what fits together is Python's), then the claim by key
        chosen = selection.choose(session, routes, queues, now, limit)
        claimed = session.execute(CLAIM, {"ids": chosen, **claimer}).all() if chosen else []
    if not claimed:  # 409 if the execution may not claim (that is why); else whether ready work was held back
        return Claimed([], held_back=work_ready(session=session, execution_id=execution_id, queues=queues, now=now))
    if not (dialect.writes_in_ctes and limit == 1):  # else the claim's statement did both
        selection.take_turns(session, (row.tenant_id for row in claimed), now)
        open_attempts(session, claimed, now)
    claimed.sort(key=lambda ti: (ti.dag_id, ti.run_id, ti.task_id, ti.map_index))
    return Claimed(claimed)
