"""Promotion: the time-driven rails, which make waiting task instances claimable once their time comes.

A retry (up_for_retry) and a reschedule (up_for_reschedule) move to scheduled, on a new epoch,
once `next_eligible_at` has passed; both rails in one statement, built once, that skips rows
another transaction holds instead of waiting for them, and announces the queues it made work
ready on. `next_eligible_at` answers when the next waiting task instance (a retry, a
reschedule, an infra re-place backing off) becomes claimable: the wake-up timer's next time.
"""

from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Update, bindparam, case, func, select, update
from sqlmodel import Session

from app.db.statements import one_of
from app.db.types import UTCDateTime
from app.orchestration import states
from app.orchestration.cas import NEW_EXECUTION, TI, from_sources, moved_to
from app.orchestration.events import announce_queues
from app.orchestration.models import TaskInstance
from app.orchestration.states import Rail

# The time-driven rails, and what each sets beyond its rail: reset_for_retry starts the next
# try on a fresh infra budget; redispatch_after_reschedule keeps the try.
PROMOTIONS: dict[Rail, dict[str, Any]] = {
    states.RESET_FOR_RETRY: {"try_number": TI.c.try_number + 1, "infra_attempts": 0, "ended_at": None,
                        "queued_at": None},
    states.REDISPATCH_AFTER_RESCHEDULE: {},
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


WAITING_STATES = (states.SCHEDULED, states.UP_FOR_RETRY, states.UP_FOR_RESCHEDULE)


def next_eligible_at(*, session: Session, now: datetime) -> datetime | None:
    """The earliest time after `now` at which a waiting task instance (a retry, a reschedule,
    an infra re-place backing off) becomes claimable: the wake-up timer's next time."""
    return session.execute(
        select(func.min(TaskInstance.next_eligible_at))
        .where(TaskInstance.state.in_(WAITING_STATES), TaskInstance.next_eligible_at > now)
    ).scalar_one()
