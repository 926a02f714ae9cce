"""Which database errors a client should hear about as retryable faults (503), on both databases."""

import enum
import sqlite3

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from app.db.retries import CONFLICTS


class DatabaseFault(enum.Enum):
    """The database faults a client should hear about as such; any other database error is a
    bug to see (500), not a retry to hide."""

    BUSY = "The database is busy: another transaction holds the lock. Retry the request."
    POOL_TIMEOUT = "No database connection was free in time. Retry the request."
    CONNECTION_LOST = "The connection to the database was lost or refused. Retry the request."
    FULL = "The database's storage is full; nothing was written."
    CONFLICT = ("Concurrent writes kept conflicting (a deadlock or a serialization failure); nothing was "
                "written. Retry the request.")

    @property
    def detail(self) -> str:
        return self.value


_SQLITE_BUSY = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
_PG_LOST = {"57P01", "57P02", "57P03"}  # admin shutdown, crash shutdown, cannot connect now


def database_fault(exc: BaseException) -> DatabaseFault | None:
    """Which DatabaseFault `exc` is, if any."""
    if isinstance(exc, PoolTimeoutError):
        return DatabaseFault.POOL_TIMEOUT
    if not isinstance(exc, DBAPIError):
        return None
    orig = exc.orig
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorcode", 0) & 0xFF  # the primary result code
        if code in _SQLITE_BUSY:
            return DatabaseFault.BUSY
        return DatabaseFault.FULL if code == sqlite3.SQLITE_FULL else None
    sqlstate = getattr(orig, "sqlstate", None) or ""
    if sqlstate in CONFLICTS:  # what app/db/retries.py ran again as often as it runs one
        return DatabaseFault.CONFLICT
    if sqlstate == "53100":  # disk_full
        return DatabaseFault.FULL
    if sqlstate == "55P03":  # lock_not_available (lock_timeout)
        return DatabaseFault.BUSY
    if exc.connection_invalidated or sqlstate in _PG_LOST or sqlstate.startswith("08"):
        return DatabaseFault.CONNECTION_LOST
    if not sqlstate and type(orig).__name__ == "OperationalError":  # refused before any SQLSTATE
        return DatabaseFault.CONNECTION_LOST
    return None
