"""Log ingest and a try's log: its epochs' streams in epoch order, each behind one system line.

Keys (contract 4.1): `{dag_id}/{run_id}/{task_id}/{map_index}/{try}.log` for epoch 0 (where
a legacy, pre-fence stream lives) and `…/{try}.e{epoch}.log` otherwise. A try's log is a
virtual concatenation read by byte position, so it can be streamed and resumed without ever
being assembled in memory: every segment but the last is immutable, because a superseded
epoch can no longer append.
"""

import errno
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from sqlmodel import Session

from app.auth.tokens import AttemptClaims
from app.errors import AppError, not_found
from app.execution import history
from app.execution.fence import current_attempt
from app.execution.models import TaskAttempt
from app.identity.models import Execution
from app.logs.store import LogConflict, LogGap, LogStore
from app.metrics import log_store_errors
from app.orchestration import states as s
from app.orchestration.models import TaskInstance
from app.orchestration.runs import get_task_instance

SYSTEM_PREFIX = "::fenceline::"


def log_key(ti: TaskInstance, try_number: int, epoch: int) -> str:
    base = f"{ti.dag_id}/{ti.run_id}/{ti.task_id}/{ti.map_index}/{try_number}"
    return f"{base}.log" if epoch == 0 else f"{base}.e{epoch}.log"


def append(*, session: Session, store: LogStore, token: AttemptClaims, offset: int, content: str,
           max_attempt_bytes: int) -> int:
    """Append to the token's own attempt stream; answers the stored size. The attempt must still
    be the task instance's current one under the relaxed rule (contract 2.5), finished or not:
    a superseded attempt's append is refused like any stale write, and a claim-less token
    appends to its try's legacy stream (`{try}.log`, served first). 409 log-offset-gap past the
    end; 413 past the per-attempt limit."""
    ti = current_attempt(session, token)
    key = log_key(ti, token.try_number, token.attempt_epoch or 0)
    data = content.encode()
    try:
        stored = store.size(key) or 0
        if max(stored, offset + len(data)) > max_attempt_bytes:
            raise AppError(413, "log-too-large", "Log too large",
                           f"This attempt's log would exceed {max_attempt_bytes} bytes.", stored_size=stored)
        return store.append(key, offset, data)
    except OSError as exc:
        if (fault := store_fault(exc)) is None:
            raise
        raise fault from exc
    except LogGap as gap:
        raise AppError(409, "log-offset-gap", "Log offset gap",
                       f"offset {offset} is past the stored end {gap.stored}; resend from there.",
                       stored_size=gap.stored) from None
    except LogConflict as clash:
        raise AppError(409, "log-offset-conflict", "Log offset conflict",
                       f"The bytes from offset {offset} differ from those already stored; nothing was written.",
                       stored_size=clash.stored) from None


# What the store's file system says, and what the client hears: a full one is the operator's
# to free (507), an unwritable one may come back (503); any other error is a bug to see.
_FULL = {errno.ENOSPC, errno.EDQUOT}
_UNAVAILABLE = {errno.EROFS, errno.EIO}


def store_fault(exc: OSError) -> AppError | None:
    """The refusal of an append the log store could not write (nothing was recorded), counted
    in fenceline_log_store_errors_total{reason}; None when `exc` is no storage fault."""
    if exc.errno not in _FULL | _UNAVAILABLE:
        return None
    log_store_errors.labels(reason=errno.errorcode[exc.errno].lower()).inc()
    if exc.errno in _FULL:
        return AppError(507, "log-store-full", "Log store full",
                        "The log store's file system is full; nothing was written. Retry once space is freed.")
    error = AppError(503, "log-store-unavailable", "Log store unavailable",
                     f"The log store cannot write ({exc.strerror}); nothing was written. Retry later.")
    error.headers = {"Retry-After": "5"}
    return error


@dataclass(frozen=True)
class Segment:
    """One epoch's part of a try's log: its system line, then its stream's first `size` bytes."""

    epoch: int
    header: bytes
    key: str
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


def _header(try_number: int, attempt: TaskAttempt | None, epoch: int, previous: TaskAttempt | None,
            runners: dict[uuid.UUID, Execution]) -> bytes:
    if attempt is None or attempt.execution_id is None:
        runner = "an unrecorded execution"
    elif (execution := runners.get(attempt.execution_id)) is not None:
        runner = f"execution {attempt.execution_id} (seat {execution.seat}, generation {execution.generation})"
    else:
        runner = f"execution {attempt.execution_id}"
    if previous is None:
        why = "first attempt of this try"
    else:
        ended = previous.reason or previous.state
        why = f"re-placed: epoch {previous.attempt_epoch} ended ({previous.outcome_kind or 'no outcome'}: {ended})"
    return f"{SYSTEM_PREFIX} try {try_number} epoch {epoch} on {runner} — {why}\n".encode()


def try_log(*, session: Session, store: LogStore, ti_id: uuid.UUID, try_number: int) -> TryLog:
    """The segments of one try's log, sized as stored now. 404 for a try that never existed."""
    ti = get_task_instance(session=session, ti_id=ti_id)
    if not 1 <= try_number <= ti.try_number:
        raise not_found("try", f"Task instance {ti_id} has no try {try_number}.")
    attempts = history.try_epochs(session, ti, try_number)
    by_epoch: dict[int, TaskAttempt | None] = {a.attempt_epoch: a for a in attempts}
    if 0 not in by_epoch and store.size(log_key(ti, try_number, 0)) is not None:
        by_epoch[0] = None  # a legacy stream written before the fence
    runners = history.runners(session, attempts)
    segments, previous = [], None
    for epoch in sorted(by_epoch):
        attempt = by_epoch[epoch]
        key = log_key(ti, try_number, epoch)
        segments.append(Segment(epoch, _header(try_number, attempt, epoch, previous, runners), key,
                                store.size(key) or 0))
        previous = attempt
    live = try_number == ti.try_number and ti.state not in (*s.FINISHED, s.UP_FOR_RETRY)
    return TryLog(segments, finished=not live)


def read(store: LogStore, log: TryLog, start: int = 0, end: int | None = None) -> Iterator[bytes]:
    """The bytes of `log` in [start, end), streamed segment by segment."""
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
        if hi > header:
            yield from store.read(seg.key, max(lo, header) - header, hi - header)
