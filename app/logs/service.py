"""Log ingest and a try's log: its epochs' streams in epoch order, each behind one system line.

Keys (contract 4.1): `{dag_id}/{run_id}/{task_id}/{map_index}/{try}.log` for epoch 0 (where
a legacy, pre-fence stream lives) and `…/{try}.e{epoch}.log` otherwise. A try's log is a
virtual concatenation read by byte position, so it can be streamed and resumed without ever
being assembled in memory: every segment but the last is immutable, because a superseded
epoch can no longer append.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, bindparam, select
from sqlmodel import Session

from app.auth.tokens import AttemptClaims
from app.errors import AppError, not_found
from app.execution import history
from app.execution.fence import current_attempt
from app.logs.models import LogRemoval
from app.logs.schemas import LogAppend, LogAppended
from app.logs.stores.base import LogConflict, LogGap, LogStore, LogStoreFault, LogStoreFull
from app.orchestration import states
from app.orchestration.models import TaskInstance
from app.telemetry.metrics import log_bytes_appended, log_store_errors

SYSTEM_PREFIX = "::fenceline::"


def log_key(ti: TaskInstance, try_number: int, epoch: int) -> str:
    base = f"{ti.dag_id}/{ti.run_id}/{ti.task_id}/{ti.map_index}/{try_number}"
    return f"{base}.log" if epoch == 0 else f"{base}.e{epoch}.log"


def append(*, session: Session, store: LogStore, token: AttemptClaims, offset: int, content: str,
           max_request_bytes: int, max_attempt_bytes: int) -> int:
    """Append to the token's own attempt stream, and answer the stored size.

    The attempt must still be the task instance's current one under the relaxed rule (contract
    2.5), finished or not, so a superseded attempt's append is refused like any stale write. A
    claim-less token appends to its try's legacy stream (`{try}.log`, served first). Past the
    per-request limit the answer is 413 payload-too-large, past the stored end 409
    log-offset-gap, and past the per-attempt limit 413."""
    data = content.encode()
    if len(data) > max_request_bytes:
        raise AppError(413, "payload-too-large", "Payload too large",
                       f"An append carries at most {max_request_bytes} bytes.")
    ti = current_attempt(session, token)
    key = log_key(ti, token.try_number, token.attempt_epoch or 0)
    # An append ending within the limit cannot grow the stream past it (bytes before its offset
    # are already stored), so the store is asked for its size only to explain a refusal.
    if offset + len(data) > max_attempt_bytes:
        raise AppError(413, "log-too-large", "Log too large", f"This attempt's log would exceed {max_attempt_bytes} "
                       "bytes.", stored_size=store.size(key, session=session) or 0)
    try:
        return store.append(key, offset, data, session=session)
    except LogGap as gap:
        raise AppError(409, "log-offset-gap", "Log offset gap",
                       f"offset {offset} is past the stored end {gap.stored}; resend from there.",
                       stored_size=gap.stored) from None
    except LogConflict as clash:
        raise AppError(409, "log-offset-conflict", "Log offset conflict",
                       f"The bytes from offset {offset} differ from those already stored; nothing was written.",
                       stored_size=clash.stored) from None


def fault_refusal(fault: LogStoreFault, *, reading: bool = False) -> AppError:
    """What a store's fault answers: 507 log-store-full, else 503 log-store-unavailable (retry
    later), worded for a read (nothing was sent yet) or a write (the store recorded nothing, and
    an agent keeps its unshipped log and sends it again)."""
    if isinstance(fault, LogStoreFull):
        return AppError(507, "log-store-full", "Log store full",
                        f"The log store has no room; nothing was written ({fault}).")
    detail = (f"The log store cannot be read now ({fault}). Retry later." if reading else
              f"The log store cannot be used now; nothing was written ({fault}). Retry later.")
    refusal = AppError(503, "log-store-unavailable", "Log store unavailable", detail)
    refusal.headers = {"Retry-After": "5"}
    return refusal


@dataclass(frozen=True)
class LogEntryAppender:
    """Appends one `log` entry of a batch (app/execution/batch.py, which the app hands this to)
    as POST /v1/attempts/logs would, and refuses a store's fault as that route does.

    An append writes at most one statement, its last (the chunk's row), so the batch gives it no
    savepoint: a fault the database meets fails the whole batch, as any database fault of a
    batch does (507 or 503, app/logs/deps.py), and nothing of it is written."""

    store: LogStore
    max_request_bytes: int
    max_attempt_bytes: int

    def __call__(self, session: Session, token: AttemptClaims, fields: dict[str, Any]) -> dict[str, Any]:
        body = LogAppend.model_validate(fields)  # a ValidationError is the entry's 422
        try:
            size = append(session=session, store=self.store, token=token, offset=body.offset, content=body.content,
                          max_request_bytes=self.max_request_bytes, max_attempt_bytes=self.max_attempt_bytes)
        except LogStoreFault as fault:
            if fault.in_database:
                raise
            log_store_errors.labels(reason=fault.reason).inc()
            raise fault_refusal(fault) from None
        log_bytes_appended.inc(len(body.content.encode()))
        return LogAppended(size=size).model_dump()


@dataclass(frozen=True)
class Segment:
    """One epoch's part of a try's log: its system line, then its stream's first `size` bytes
    (a removed log ends with a segment that is only retention's line: no epoch, no stream)."""

    epoch: int | None
    header: bytes
    key: str | None
    size: int

    @property
    def length(self) -> int:
        return len(self.header) + self.size


@dataclass(frozen=True)
class TryLog:
    segments: list[Segment]
    finished: bool  # no more bytes will come

    @property
    def size(self) -> int:
        return sum(seg.length for seg in self.segments)


def _header(try_number: int, attempt: Row | None, epoch: int, previous: Row | None) -> bytes:
    if attempt is None or attempt.execution_id is None:
        runner = "an unrecorded execution"
    elif attempt.seat is not None:
        runner = f"execution {attempt.execution_id} (seat {attempt.seat}, generation {attempt.generation})"
    else:
        runner = f"execution {attempt.execution_id}"
    if previous is None:
        why = "first attempt of this try"
    else:
        ended = previous.reason or previous.state
        why = f"re-placed: epoch {previous.attempt_epoch} ended ({previous.outcome_kind or 'no outcome'}: {ended})"
    return f"{SYSTEM_PREFIX} try {try_number} epoch {epoch} on {runner} — {why}\n".encode()


REMOVALS = LogRemoval.__table__
# The run's retention record, by key; and a try's epochs, each row carrying it too (one read
# instead of two). Both built once.
REMOVED_AT = select(REMOVALS.c.removed_at).where(REMOVALS.c.dag_run_id == bindparam("run"))
EPOCHS = history.TRY_EPOCHS.add_columns(REMOVED_AT.scalar_subquery().label("run_logs_removed_at"))


def _removed_at(session: Session, ti: TaskInstance | Row, attempts: list[Row]) -> datetime | None:
    """When retention removed this try's log: its run's logs were removed after every epoch of
    the try was claimed (a try claimed later, after the run was cleared, keeps its log). Read
    off the epochs' rows; asked on its own only for a try without attempt records."""
    removed = attempts[0].run_logs_removed_at if attempts else \
        session.execute(REMOVED_AT, {"run": ti.dag_run_id}).scalar()
    if removed is None or any(a.claimed_at >= removed for a in attempts):
        return None
    return removed


def try_log(*, session: Session, store: LogStore, ti: TaskInstance | Row, try_number: int) -> TryLog:
    """The segments of one try of `ti`'s log, sized as stored now (one read of the store's
    sizes for them all). 404 for a try that never existed."""
    if not 1 <= try_number <= ti.try_number:
        raise not_found("try", f"Task instance {ti.id} has no try {try_number}.")
    attempts = history.try_epochs(session, ti.id, try_number, statement=EPOCHS, run=ti.dag_run_id)
    removed = _removed_at(session, ti, attempts)
    by_epoch: dict[int, Row | None] = {a.attempt_epoch: a for a in attempts}
    if removed:
        sizes: dict[str, int | None] = {}
    else:
        # Epoch 0 without a record: a legacy stream written before the fence, if one is stored.
        keys = [log_key(ti, try_number, epoch) for epoch in sorted({0, *by_epoch})]
        sizes = store.sizes(keys, session=session)
        if 0 not in by_epoch and sizes.get(keys[0]) is not None:
            by_epoch[0] = None
    segments, previous = [], None
    for epoch in sorted(by_epoch):
        attempt = by_epoch[epoch]
        key = log_key(ti, try_number, epoch)
        segments.append(Segment(epoch, _header(try_number, attempt, epoch, previous), key, sizes.get(key) or 0))
        previous = attempt
    if removed:
        line = f"{SYSTEM_PREFIX} log removed by retention on {removed:%Y-%m-%d %H:%M:%S} UTC\n"
        segments.append(Segment(None, line.encode(), None, 0))
        return TryLog(segments, finished=True)
    live = try_number == ti.try_number and ti.state not in (*states.FINISHED, states.UP_FOR_RETRY)
    return TryLog(segments, finished=not live)


def read(store: LogStore, log: TryLog, start: int = 0, end: int | None = None) -> Iterator[bytes]:
    """The bytes of `log` in [start, end), streamed segment by segment. The store's first read
    is begun before this answers: a store that cannot be read raises its LogStoreFault here,
    before a byte of the response is sent (a 503), not after the first system line went out as a
    200. A read that fails later raises from the iterator, and the server aborts the response."""
    parts = list(_parts(log, start, end))
    for n, part in enumerate(parts):
        if not isinstance(part, bytes):
            opened = store.read(*part)
            first = next(opened, None)
            return _stream(store, parts, n, first, opened)
    return iter(parts)  # type: ignore[arg-type]  (only system lines: nothing to read from the store)


def _parts(log: TryLog, start: int, end: int | None) -> Iterator[bytes | tuple[str, int, int]]:
    """What [start, end) of `log` is made of: system lines, and (key, start, end) reads of streams."""
    end = log.size if end is None else min(end, log.size)
    position = 0
    for seg in log.segments:
        seg_start, seg_end = position, position + seg.length
        position = seg_end
        if seg_end <= start or seg_start >= end:
            continue
        lo, hi = max(start, seg_start) - seg_start, min(end, seg_end) - seg_start
        header = len(seg.header)
        if lo < header:
            yield seg.header[lo:min(hi, header)]
        if hi > header and seg.key is not None:
            yield seg.key, max(lo, header) - header, hi - header


def _stream(store: LogStore, parts: list[bytes | tuple[str, int, int]], opened_at: int, first: bytes | None,
            opened: Iterator[bytes]) -> Iterator[bytes]:
    for n, part in enumerate(parts):
        if n < opened_at:
            yield part  # type: ignore[misc]  (the system lines before the first stream)
        elif n == opened_at:
            if first is not None:
                yield first
            yield from opened
        elif isinstance(part, bytes):
            yield part
        else:
            yield from store.read(*part)
