""""Work may be ready" events, emitted inside the transaction that makes work ready (contract
2.2; docs/decisions/0006-waiting-claims.md).

A rail that makes task instances claimable calls `announce` inside its transaction. On
PostgreSQL that is a `NOTIFY fenceline_ready`, delivered to every listening connection only if
the transaction commits (app/execution/listener.py listens). On SQLite (one process) the event
waits in the session and goes, once it commits, to this process's callbacks (`listen_locally`:
app/execution/hub.py registers its hub's); a rollback drops it. Payloads are JSON objects, so a
later key is a compatible addition.

Routing (docs/behaviour.md, "Routing"): an event about new work names its queue; a freed pool
slot or tenant place, a grown pool or a raised or removed cap is a `room` event; an execution
superseded or observed terminal is a `stale` event.
"""

import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, event, func, literal, text
from sqlalchemy.orm import Session

from app.db.dialect import dialect_of

CHANNEL = "fenceline_ready"
_PENDING, _SENT, _TIMED = "fenceline_wakeups_pending", "fenceline_wakeups_sent", "fenceline_wakeups_timed"
NOTIFY = text("SELECT pg_notify(:channel, :payload)")


@dataclass(frozen=True)
class Ready:
    """`count` task instances (None: unknown, at least one) on `queue` (None: any) become
    claimable at `at` (Unix seconds; None: now); or, with `room`, work held back by a pool or a
    cap may now fit; or, with `stale`, that execution may claim no more."""

    count: int | None = None
    at: float | None = None
    queue: str | None = None
    room: bool | None = None
    stale: str | None = None

    def payload(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None}, separators=(",", ":"))

    @classmethod
    def parse(cls, payload: str) -> "Ready":
        """The event a payload names; an unreadable one is taken as "something, now"."""
        try:
            fields = json.loads(payload) if payload else {}
            count, at, queue, stale = fields.get("count"), fields.get("at"), fields.get("queue"), fields.get("stale")
            return cls(int(count) if count is not None else None, float(at) if at is not None else None,
                       str(queue) if queue is not None else None, bool(fields.get("room")) or None,
                       str(uuid.UUID(stale)) if stale is not None else None)
        except (ValueError, TypeError, AttributeError):
            return cls()


def announce(session: Session, *, count: int | None = None, at: datetime | None = None, queue: str | None = None,
             room: bool = False, stale: uuid.UUID | None = None) -> None:
    """Tell waiting claimers, when `session`'s transaction commits, that `count` task instances
    on `queue` become claimable at `at` (now when None); with `room`, that a pool slot or a
    tenant place was freed or added; with `stale`, that this execution may claim no more.
    Nothing is told if the transaction rolls back."""
    ready = Ready(count, at.timestamp() if at is not None else None, queue, room or None,
                  str(stale) if stale is not None else None)
    if at is not None:
        session.info[_TIMED] = True  # this process's claims take the time-driven rails once it commits
    if dialect_of(session).notifies:
        payload = ready.payload()
        sent = session.info.setdefault(_SENT, set())
        if payload not in sent:  # the same event twice in one transaction is delivered once anyway
            sent.add(payload)
            session.execute(NOTIFY, {"channel": CHANNEL, "payload": payload})
    else:
        session.info.setdefault(_PENDING, []).append(ready)


def announce_queues(session: Session, queues: Iterable[str]) -> None:
    """Announce task instances on these queues (one queue per task instance) claimable now."""
    for queue, count in sorted(Counter(queues).items()):
        announce(session, count=count, queue=queue)


def announce_room(session: Session) -> None:
    """Announce that a pool slot or a tenant place was freed or added."""
    announce(session, room=True)


def announce_stale(session: Session, execution_id: uuid.UUID) -> None:
    """Announce that `execution_id` was superseded or observed terminal: it may claim no more."""
    announce(session, stale=execution_id)


def room_notification() -> ColumnElement[Any]:
    """PostgreSQL: announce_room as a column, for the RETURNING of a statement that moves a row
    out of flight (evaluated once per row moved, delivered on commit, like announce_room)."""
    return func.pg_notify(literal(CHANNEL), literal(Ready(room=True).payload()))


# Told after a commit, in the committing thread: `(events, timed)`, the events the transaction
# announced (SQLite; on PostgreSQL they come back through LISTEN, and none is passed) and whether
# it made time-driven work due (on both), so that a claim right after the commit takes it.
Committed = Callable[[Sequence[Ready], bool], None]
_local: dict[str, set[Committed]] = {}  # by database URL


def listen_locally(url: str, committed: Committed) -> None:
    """Call `committed` after each commit of a session bound to the database at `url` that
    announced something, in this process."""
    _local.setdefault(url, set()).add(committed)


def unlisten(url: str, committed: Committed) -> None:
    _local.get(url, set()).discard(committed)


@event.listens_for(Session, "after_commit")
def _after_commit(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint's release: the events wait for the transaction's own commit
    session.info.pop(_SENT, None)
    pending, timed = session.info.pop(_PENDING, None), session.info.pop(_TIMED, False)
    if pending or timed:
        for committed in list(_local.get(str(session.get_bind().url), ())):
            committed(pending or (), timed)


@event.listens_for(Session, "after_rollback")
def _after_rollback(session: Session) -> None:
    session.info.pop(_SENT, None)  # PostgreSQL drops a rolled-back savepoint's NOTIFYs: send again if told again
    if session.in_nested_transaction():
        return  # a savepoint's: what was announced may still commit (an event too many wakes a look, no more)
    for key in (_PENDING, _TIMED):
        session.info.pop(key, None)
