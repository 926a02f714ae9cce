"""The log store contract: append-only byte streams under keys, and its faults.

Every store keeps the same guarantees. An append is idempotent under retry: the writer says at
which offset it believes the stream ends; bytes already stored are not written twice (and must
be the same bytes, else LogConflict), and a gap is refused (LogGap). Two writers appending at
one offset at once never both win. Reads stream in chunks, never loading a stream whole.

A store that cannot do what it is asked raises a LogStoreFault at its boundary, having recorded
nothing: LogStoreFull (the disk, quota or database is full) or LogStoreUnavailable (read-only,
an I/O error, refused, timed out). app/logs/deps.py turns those into HTTP answers, in one place.

Three stores implement it, a module each beside this one: FileLogStore (file.py),
DatabaseLogStore (database.py) and S3LogStore (s3.py); the package's chooser (__init__.py) picks
one from FENCELINE_LOG_STORE.
"""

from collections.abc import Iterable, Iterator
from typing import Protocol

from sqlmodel import Session

CHUNK = 64 * 1024


class LogGap(Exception):
    """The writer's offset is past the end of the stored stream."""

    def __init__(self, stored: int) -> None:
        super().__init__(f"stored size is {stored}")
        self.stored = stored


class LogConflict(Exception):
    """Bytes the writer resends differ from what is stored at that offset."""

    def __init__(self, stored: int) -> None:
        super().__init__(f"stored size is {stored}")
        self.stored = stored


class LogStoreFault(Exception):
    """The store could not do what it was asked, and recorded nothing. The message says what
    the store answered; `reason` labels it in fenceline_log_store_errors_total (the errno name
    for the file store: enospc, erofs, eio, …). `in_database`: the database refused a statement
    of the transaction the store was given, which can then write nothing more (PostgreSQL
    aborts it): a batch fails whole on such a fault (app/logs/service.py LogEntryAppender)."""

    def __init__(self, detail: str, reason: str, *, in_database: bool = False) -> None:
        super().__init__(detail)
        self.reason, self.in_database = reason, in_database


class LogStoreFull(LogStoreFault):
    """No room: a full disk or database, a quota reached."""


class LogStoreUnavailable(LogStoreFault):
    """Read-only, an I/O error, refused or timed out: worth retrying later."""


class LogStore(Protocol):
    """A store of attempt logs, keyed by `/`-separated relative paths (app/logs/service.py
    `log_key`).

    Writes, and the sizes read while a request runs, go through that request's `session`: a
    store that keeps its data or its chunk index in the database joins the request's
    transaction, so a refused request leaves nothing behind. `read` and `keys` open their own
    short connections, because a streamed answer outlives the request's transaction. A store
    `within` a session reads in that session's transaction instead, for what a request reads
    while it runs."""

    name: str  # as FENCELINE_LOG_STORE names it
    fault_reasons: tuple[str, ...]  # every `reason` its LogStoreFaults carry

    def size(self, key: str, *, session: Session) -> int | None:
        """The stream's length in bytes; None if it does not exist."""

    def sizes(self, keys: list[str], *, session: Session) -> dict[str, int | None]:
        """size() of each of `keys` (a try's epochs), asked at once."""

    def append(self, key: str, offset: int, data: bytes, *, session: Session) -> int:
        """Store `data` as the bytes from `offset`; answers the new length. LogGap if `offset` is
        beyond the end; bytes before the end must equal what is stored (a retry), else
        LogConflict. Durable once the session commits."""

    def read(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """The stream's bytes in [start, end), in chunks; nothing for a stream that does not exist."""

    def within(self, session: Session) -> "LogStore":
        """This store, its reads made in `session`'s transaction (itself, for a store that keeps
        nothing in the database)."""

    def delete(self, keys: Iterable[str], *, session: Session) -> None:
        """Remove these streams (those that do not exist are skipped)."""

    def keys(self) -> Iterator[str]:
        """Every stored key, each once."""

    def probe(self) -> None:
        """Write and read back a probe object (readiness); a LogStoreFault when that fails."""
