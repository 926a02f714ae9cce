"""The per-epoch attempt record: opened at claim, closed by the attempt's one outcome, and
found by its AttemptKey."""

import uuid
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import CTE, Update, bindparam, insert, literal, select, update
from sqlmodel import Session

from app.auth.attempt_key import AttemptKey
from app.db.statements import insert_ignore
from app.db.types import utcnow
from app.execution.models import TaskAttempt
from app.orchestration.models import TaskInstance
from app.orchestration.outcomes import Outcome
from app.orchestration.states import AttemptState

OUTCOME_KIND = {"success": "success", "failed": "app", "unexecutable": "infra", "rescheduled": "rescheduled"}


ATTEMPTS = TaskAttempt.__table__
# An attempt's key, bound: the statements of the agents' writes are built once (building one
# cost more than running it).
IS_KEY = (ATTEMPTS.c.task_instance_id == bindparam("key_ti_id"), ATTEMPTS.c.try_number == bindparam("key_try"),
          ATTEMPTS.c.attempt_epoch == bindparam("key_epoch"))
OPEN = insert(ATTEMPTS)


def key_params(key: AttemptKey) -> dict[str, Any]:
    return {"key_ti_id": key.ti_id, "key_try": key.try_number, "key_epoch": key.attempt_epoch}


def opening(claimed: CTE) -> CTE:
    """PostgreSQL: open_attempts for the one row of `claimed` (the CTE of the row a claim of one
    took), in the claim's own statement; the record's id bound as `attempt_id`, the time as `now`."""
    columns = {"id": bindparam("attempt_id", type_=ATTEMPTS.c.id.type), "task_instance_id": claimed.c.id,
               "try_number": claimed.c.try_number, "attempt_epoch": claimed.c.attempt_epoch,
               "execution_id": claimed.c.execution_id, "state": literal(AttemptState.QUEUED, ATTEMPTS.c.state.type),
               "user_code_started": literal(False), "claimed_at": bindparam("now", type_=ATTEMPTS.c.claimed_at.type)}
    return (insert(ATTEMPTS).from_select(list(columns), select(*columns.values()))
            .returning(ATTEMPTS.c.id).cte("opened"))


def _new_record(key: AttemptKey, claimed_at: datetime, **values: Any) -> dict[str, Any]:
    """A new attempt record's every column: queued, its user code not started, nothing else
    known but `values` (every row of one INSERT names the same columns)."""
    return {"id": uuid.uuid4(), "task_instance_id": key.ti_id, "try_number": key.try_number,
            "attempt_epoch": key.attempt_epoch, "execution_id": None, "state": AttemptState.QUEUED,
            "outcome_kind": None, "reason": None, "user_code_started": False, "observed_phase": None,
            "observed_reason": None, "claimed_at": claimed_at, "started_at": None, "ended_at": None, **values}


def open_attempts(session: Session, claimed: list[TaskInstance], now: datetime) -> None:
    """The records of the attempts `claimed` were just claimed for, in one statement."""
    session.execute(OPEN, [_new_record(AttemptKey(ti.id, ti.try_number, ti.attempt_epoch), now,
                                       execution_id=ti.execution_id) for ti in claimed])


@cache
def _updating(columns: tuple[str, ...]) -> Update:
    return update(ATTEMPTS).where(*IS_KEY).values({name: bindparam(f"set_{name}") for name in columns})


def update_attempt(session: Session, key: AttemptKey, **values: Any) -> None:
    """Update the record of `key`. An attempt dispatched before the fence existed has none, so
    one is made, unless it was made meanwhile (another request of the same attempt, in a
    transaction of its own, may make it first): a record made first stands."""
    updated = session.execute(_updating(tuple(sorted(values))),
                              {**key_params(key), **{f"set_{name}": v for name, v in values.items()}}).rowcount
    if not updated:
        claimed_at = values.get("started_at") or values.get("ended_at") or utcnow()
        insert_ignore(session, TaskAttempt, _new_record(key, claimed_at, **values),
                      ["task_instance_id", "try_number", "attempt_epoch"])


def recording(moved: CTE, **values: Any) -> CTE:
    """PostgreSQL: the update of the records of the attempts `moved` (a CTE of the task instance
    rows a statement moves, with their id, try_number and attempt_epoch), as a CTE of the
    records' ids. A task instance and its record then move in one statement, the task
    instance's row first, as the lock order wants."""
    return (update(ATTEMPTS).where(ATTEMPTS.c.task_instance_id == moved.c.id,
                                   ATTEMPTS.c.try_number == moved.c.try_number,
                                   ATTEMPTS.c.attempt_epoch == moved.c.attempt_epoch)
            .values(**values).returning(ATTEMPTS.c.id).cte(f"{moved.name}_recorded"))


@dataclass(frozen=True)
class Ending:
    """How an attempt's record ends: its state, why, and the kind of the outcome that ended it
    (None when a hand-back or an operator's rail ended it, not a reported outcome)."""

    state: AttemptState
    reason: str | None = None
    outcome_kind: str | None = None

    @classmethod
    def of(cls, outcome: Outcome) -> "Ending":
        return cls(AttemptState(outcome.kind), outcome.reason, OUTCOME_KIND[outcome.kind])


# The ends that are no outcome: a claim handed back, and the attempts an operator's rail fences off.
RELEASED = Ending(AttemptState.RELEASED)
CLEARED = Ending(AttemptState.CLEARED, "cleared by an operator")
CANCELLED = Ending(AttemptState.CANCELLED, "run cancelled by an operator")
MARKED = {state: Ending(AttemptState(f"marked_{state}"), f"marked {state} by an operator")
          for state in ("success", "failed")}


def close_attempt(session: Session, key: AttemptKey, ending: Ending | Outcome, now: datetime) -> None:
    """End the record of `key`: every path that ends an attempt (a report, a reaper's mark, a
    hand-back, an operator's rail) closes its record here, or, for a success on PostgreSQL, in
    the rail's own statement (closing_success)."""
    if isinstance(ending, Outcome):
        ending = Ending.of(ending)
    update_attempt(session, key, state=ending.state, outcome_kind=ending.outcome_kind, reason=ending.reason,
                   ended_at=now)


def closing_success(settled: CTE) -> CTE:
    """PostgreSQL: close_attempt for a success, as a CTE riding on the success rail's statement
    (outcomes.settle_success's `alongside`), its reason bound as `close_reason`."""
    return recording(settled, state=AttemptState.SUCCESS, outcome_kind=OUTCOME_KIND["success"],
                     reason=bindparam("close_reason", type_=ATTEMPTS.c.reason.type), ended_at=bindparam("now"))


def ended_with(session: Session, key: AttemptKey, outcome: Outcome) -> bool:
    """Whether the record of `key` was closed with `outcome` already (a report delivered again)."""
    record = find_attempt(session, key)
    return record is not None and record.outcome_kind == OUTCOME_KIND[outcome.kind] and record.reason == outcome.reason


def find_attempt(session: Session, key: AttemptKey) -> TaskAttempt | None:
    return session.execute(
        select(TaskAttempt).where(TaskAttempt.task_instance_id == key.ti_id, TaskAttempt.try_number == key.try_number,
                                  TaskAttempt.attempt_epoch == key.attempt_epoch)
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()


def list_attempts(*, session: Session, ti_id: uuid.UUID) -> list[TaskAttempt]:
    """Every attempt record of the task instance, in (try, epoch) order."""
    return list(session.execute(
        select(TaskAttempt).where(TaskAttempt.task_instance_id == ti_id)
        .order_by(TaskAttempt.try_number, TaskAttempt.attempt_epoch)
    ).scalars())
