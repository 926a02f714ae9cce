"""Batches (contract 2.11): one request carrying many attempts' heartbeats, reports and log
appends, each answered exactly as its single request would be.

Every entry is checked on its own, in the order its single request checks it: its token (401,
403 for another scope or for an attempt of another execution than the bearer's), then its
fields (422), then the fence (2.5).

Entries are applied in order, each whole or not at all. A report runs in a savepoint of its
own, so a refusal rolls back that entry and nothing else; a report that is one statement
refused before it writes (fence.writes_in_one_statement) and a log append, whose one write is
its last, need none. A database fault fails the batch whole.

What entries can share, they share: a run of consecutive heartbeats is one guarded statement
(fence.heartbeats), and the runs of every outcome in the batch are locked first, in key order
(cas.lock_runs), so two batches, or a batch and a reaper sweep, never deadlock. A batch sent
again changes nothing twice, as each entry answers as its single request does when repeated.
A batch of heartbeats alone commits without waiting for the disk (Dialect.commit_without_flush_wait).
Log appends belong to the logs domain, above this one, so the app hands them in
(BatchContext.append_log_entry).
"""

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy.exc import DataError, StatementError
from sqlmodel import Session

from app.auth.service import verified_attempt
from app.auth.tokens import AttemptClaims, KeyRing
from app.db.dialect import dialect_of
from app.errors import AppError, forbidden, invalid_input, unauthorized, unstorable_value
from app.execution import fence
from app.execution.schemas import MAX_BATCH_ENTRIES, Report
from app.orchestration.cas import lock_runs
from app.orchestration.outcomes import InfraBackoff
from app.telemetry.tracing import BATCH_OPS

# An entry's members beside its single request's body: its bearer, its route, and the W3C
# traceparent its request's header would carry (app/telemetry/tracing.batch_entries).
ENVELOPE = ("attempt_token", "op", "traceparent")
# An unknown op's 422, worded as pydantic words a Literal's (the single routes' own refusals).
OP_EXPECTED = f"Input should be {', '.join(map(repr, BATCH_OPS[:-1]))} or {BATCH_OPS[-1]!r}"
# A log entry's work, (session, token, fields) -> the answer's body, raising what the single
# append raises: app/logs/service.py LogEntryAppender.
AppendLogEntry = Callable[[Session, AttemptClaims, dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Result:
    status: int
    body: dict[str, Any]

    @classmethod
    def refused(cls, refusal: AppError) -> "Result":
        return cls(refusal.status, {"type": refusal.type, "title": refusal.title, "status": refusal.status,
                                    "detail": refusal.detail, **refusal.extra})


@dataclass(frozen=True)
class Entry:
    index: int
    op: str
    token: AttemptClaims
    fields: dict[str, Any]


@dataclass(frozen=True)
class BatchContext:
    """What every entry of a batch is checked and applied with."""

    execution_id: uuid.UUID  # the bearer's
    keyring: KeyRing
    accept_legacy: bool
    backoff: InfraBackoff
    append_log_entry: AppendLogEntry


def accepted(ti: Any) -> Result:
    """AttemptStatus.of(ti) as JSON, written out without the model: a batch answers hundreds,
    and a model for each is a measurable share of its cost (docs/performance.md, "Batches")."""
    return Result(200, {"ti_id": str(ti.id), "state": ti.state, "try_number": ti.try_number,
                        "attempt_epoch": ti.attempt_epoch, "should_terminate": False})


def too_many(count: int) -> AppError:
    return AppError(413, "batch-too-large", "Batch too large",
                    f"A batch carries at most {MAX_BATCH_ENTRIES} entries, not {count}; send the rest in another.")


def apply(*, session: Session, context: BatchContext, entries: list[dict[str, Any]]) -> list[Result]:
    """Every entry's answer, in order (413 for the whole batch past MAX_BATCH_ENTRIES)."""
    if len(entries) > MAX_BATCH_ENTRIES:
        raise too_many(len(entries))
    results: list[Result | None] = [None] * len(entries)
    checked: list[Entry] = []
    for index, raw in enumerate(entries):
        try:
            checked.append(_checked(context, index, raw))
        except AppError as refusal:
            results[index] = Result.refused(refusal)
    if checked and all(e.op == "heartbeat" for e in checked):
        # A heartbeat a database crash loses leaves its attempt one beat older, and the silence of
        # an outage never counts toward a reaper (contract 2.6): heartbeats alone need not wait
        # for the disk (a fleet's batches, docs/performance.md "Issue 45: the fleet's tail").
        dialect_of(session).commit_without_flush_wait(session)
    # The runs of every outcome first, in key order (cas.lock_runs): before any task instance's row.
    lock_runs(session, of={e.token.ti_id for e in checked if e.op == "report" and e.fields.get("state") != "running"})
    for group in _groups(checked):
        if group[0].op == "heartbeat":
            answers = fence.heartbeats(session=session, tokens=[e.token for e in group])
            for entry, answer in zip(group, answers, strict=True):
                results[entry.index] = Result.refused(answer) if isinstance(answer, AppError) else accepted(answer)
        else:
            results[group[0].index] = _applied(session, context, group[0])
    return [r for r in results if r is not None]


def _checked(context: BatchContext, index: int, raw: dict[str, Any]) -> Entry:
    """An entry whose token and shape are good, as its single request checks them."""
    credentials, op = raw.get("attempt_token"), raw.get("op")
    if not isinstance(credentials, str):
        raise unauthorized("A bearer token is required.")  # as the single request without one
    token, execution = verified_attempt(context.keyring, credentials, accept_legacy=context.accept_legacy)
    if execution != str(context.execution_id):
        raise forbidden(f"The attempt token is for execution {execution}, not the bearer's {context.execution_id}.")
    if op not in BATCH_OPS:
        raise invalid_input([{"loc": ["body", "op"], "msg": OP_EXPECTED, "type": "literal_error"}])
    fields = {k: v for k, v in raw.items() if k not in ENVELOPE}
    if op == "heartbeat" and fields:
        raise invalid_input([{"loc": ["body", name], "msg": "Extra inputs are not permitted", "type": "extra_forbidden"}
                             for name in fields])
    return Entry(index, op, token, fields)


def _groups(entries: list[Entry]) -> Iterator[list[Entry]]:
    """The entries in order: each run of consecutive heartbeats together (they commute: each
    stamps its own row), every other entry alone."""
    group: list[Entry] = []
    for entry in entries:
        if group and (entry.op != "heartbeat" or group[0].op != "heartbeat"):
            yield group
            group = []
        group.append(entry)
    if group:
        yield group


def _applied(session: Session, context: BatchContext, entry: Entry) -> Result:
    """A report or a log append, whole or not at all: in a savepoint of its own, unless its one
    write is its last (a log append, or a report that fence.writes_in_one_statement). Without a
    savepoint, a statement the database refuses loses the batch's transaction, and with it the
    batch."""
    try:
        if entry.op == "log":
            return Result(200, context.append_log_entry(session, entry.token, entry.fields))
        body = Report.model_validate(entry.fields)
        if fence.writes_in_one_statement(session, body):
            return accepted(_report(session, context, entry, body))
        return _in_savepoint(session, lambda: accepted(_report(session, context, entry, body)))
    except ValidationError as exc:
        return Result.refused(invalid_input([{"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]}
                                             for e in exc.errors()]))
    except AppError as refusal:
        return Result.refused(refusal)


def _report(session: Session, context: BatchContext, entry: Entry, body: Report) -> Any:
    return fence.report(session=session, key=entry.token.key, body=body, backoff=context.backoff, run_locked=True)


def _in_savepoint(session: Session, apply: Callable[[], Result]) -> Result:
    """`apply()` in a savepoint: a refusal, or a value no column holds (the single request's
    422), rolls back this entry alone."""
    try:
        with session.begin_nested():
            return apply()
    except (DataError, StatementError) as exc:
        if not isinstance(exc, DataError) and not isinstance(exc.orig, UnicodeEncodeError | OverflowError):
            raise
        return Result.refused(unstorable_value())
