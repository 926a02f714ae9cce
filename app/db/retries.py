"""A transaction the database rolled back for a conflict between concurrent writers (a deadlock,
a serialization failure) is run again, whole, a bounded number of times (contract 2.12;
docs/decisions/0013-one-lock-order.md).

The server takes its row locks in one global order, so a deadlock should not happen; this is
the net for what still does. Only a transaction that is the caller's whole work is run again:
the database rolled all of it back, so nothing of it stands, and nothing of it was committed
(a work that committed part of itself is never run again: its conflict is raised). What a
conflict that persists past the retries raises is answered 503 `database-conflict` with
`Retry-After` (app/web/problems.py).
"""

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

T = TypeVar("T")
log = logging.getLogger("fenceline.db")

# SQLSTATE -> the conflict's kind, as metrics and logs name it.
CONFLICTS = {"40P01": "deadlock", "40001": "serialization"}
# How many times a work runs at most: the first time and three more. A deadlock costs
# PostgreSQL's deadlock_timeout (1 s by default) to find, so this bounds a request at a few seconds.
RUNS = 4
_COMMITS = "fenceline_commits"


def conflict_of(exc: BaseException) -> str | None:
    """The kind of conflict `exc` is (`deadlock`, `serialization`), if it is one."""
    if not isinstance(exc, DBAPIError):
        return None
    return CONFLICTS.get(getattr(exc.orig, "sqlstate", None) or "")


@event.listens_for(Session, "after_commit")
def _count_commit(session: Session) -> None:
    # How many commits each session made: a work that committed is never run again.
    session.info[_COMMITS] = session.info.get(_COMMITS, 0) + 1


def retried(sessions: list[Session], work: Callable[[], T], *, seen: Callable[[str, bool], None]) -> T:
    """`work()`, run again after a conflict that rolled its transaction back, while it committed
    nothing and up to RUNS times in all, its sessions rolled back and emptied first (every
    row it read is read again). `seen(kind, retried)` hears of every conflict: whether it was
    run again, or the conflict raised."""
    run = 1
    while True:
        commits = [s.info.get(_COMMITS, 0) for s in sessions]
        try:
            return work()
        except DBAPIError as exc:
            kind = conflict_of(exc)
            again = (kind is not None and run < RUNS
                     and commits == [s.info.get(_COMMITS, 0) for s in sessions])
            if kind is not None:
                seen(kind, again)
            if not again:
                raise
            log.info("a %s rolled the transaction back (run %d of %d): running it again", kind, run, RUNS)
            for session in sessions:
                session.rollback()
                session.expunge_all()
            time.sleep(random.uniform(0, 0.02 * run))  # the other side of the conflict goes first
            run += 1
