"""The fence a task holds, the refusal a stale one gets, and the guarded write for SQL stores.

A store keeps, per fence key, the largest fencing token it has accepted. A write carrying a
smaller token is refused and writes nothing; an equal or larger one moves the fence and writes.
For PostgreSQL and SQLite that is one upsert on a fence table, in the same transaction as the
write it guards: the fence row it locks (PostgreSQL: the row; SQLite: the database) stays
locked until the commit, so of two attempts racing, the later token's write is never followed
by the earlier token's.
"""

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TOKEN_ENV, KEY_ENV = "FENCELINE_FENCING_TOKEN", "FENCELINE_FENCE_KEY"
FENCE_TABLE = "fenceline_fences"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?")


class FenceError(Exception):
    """The base of this module's refusals."""


class NoFence(FenceError):
    """The environment carries no fence: the code does not run as a fenceline task attempt."""


class StaleToken(FenceError):
    """The store has seen a larger token for this key: a newer attempt has taken over, and this
    one's write was refused and wrote nothing. The attempt should stop."""

    def __init__(self, key: str, token: int, stored: int | None) -> None:
        self.key, self.token, self.stored = key, token, stored
        seen = f"{stored}" if stored is not None else "a larger one"
        super().__init__(f"fencing token {token} for {key!r} is stale: the store has seen {seen}")


@dataclass(frozen=True)
class Fence:
    """What one attempt fences with: its key (the task instance) and its token (the attempt
    epoch, larger for every later attempt of the key)."""

    key: str
    token: int

    def __post_init__(self) -> None:
        if not self.key or isinstance(self.token, bool) or not isinstance(self.token, int) or self.token < 0:
            raise ValueError("a fence is a non-empty key and a token >= 0")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "Fence":
        """The fence of the attempt this process runs for (FENCELINE_FENCE_KEY and
        FENCELINE_FENCING_TOKEN); NoFence outside a task."""
        key, token = environ.get(KEY_ENV), environ.get(TOKEN_ENV)
        if not key or not token:
            raise NoFence(f"{KEY_ENV} and {TOKEN_ENV} are not set: not running as a fenceline task")
        try:
            return cls(key, int(token))
        except ValueError:
            raise NoFence(f"{TOKEN_ENV}={token!r} is not a fencing token") from None


# --- SQL: PostgreSQL and SQLite (3.24 or later), one statement each -----------------------------

def _table(name: str) -> str:
    if not _IDENTIFIER.fullmatch(name):
        raise ValueError(f"{name!r} is not a plain table name")
    return name


def create_fence_table(conn: Any, table: str = FENCE_TABLE) -> None:
    """Create the fence table if it is missing (run it once, as a migration would; the caller
    commits). One row per key: the largest token accepted."""
    _run(conn, f"CREATE TABLE IF NOT EXISTS {_table(table)} "
               "(fence_key VARCHAR(255) PRIMARY KEY, fencing_token BIGINT NOT NULL)", {})


def advance(conn: Any, fence: Fence, table: str = FENCE_TABLE) -> None:
    """Move the fence of `fence.key` to `fence.token` in the caller's transaction, creating its
    row on first use: one upsert that changes nothing when the stored token is larger (then
    StaleToken). The row stays locked until the caller commits or rolls back, so the writes made
    after it in that transaction are the last word of a token no smaller than any accepted."""
    _in_transaction(conn)
    name = _table(table)
    moved = _run(conn, f"INSERT INTO {name} (fence_key, fencing_token) VALUES (:key, :token) "
                       f"ON CONFLICT (fence_key) DO UPDATE SET fencing_token = excluded.fencing_token "
                       f"WHERE {name}.fencing_token <= excluded.fencing_token",
                 {"key": fence.key, "token": fence.token})
    if moved == 0:
        rows = _run(conn, f"SELECT fencing_token FROM {name} WHERE fence_key = :key", {"key": fence.key}, fetch=True)
        raise StaleToken(fence.key, fence.token, rows[0][0] if rows else None)


def guarded_write(conn: Any, sql: str, params: Any = None, *, fence: Fence | None = None,
                  table: str = FENCE_TABLE) -> int:
    """Run the write `sql` (in the connection's own parameter style, with `params`) only if the
    fence (by default this attempt's, from the environment) is not stale, in the caller's
    transaction: StaleToken, and nothing written, otherwise. Answers the write's row count;
    the caller commits. `conn` is a DB-API connection (psycopg, sqlite3, …) or a SQLAlchemy
    Connection or Session (then `sql` takes `:name` parameters)."""
    advance(conn, fence or Fence.from_env(), table)
    return _run(conn, sql, params, named=False)


def _sqlalchemy(conn: Any) -> bool:
    return type(conn).__module__.startswith("sqlalchemy")


def _raw(conn: Any) -> Any:
    """The DB-API connection under `conn`."""
    if not _sqlalchemy(conn):
        return conn
    if callable(getattr(conn, "connection", None)):  # a Session: its Connection
        conn = conn.connection()
    return conn.connection.dbapi_connection


def _in_transaction(conn: Any) -> None:
    """Refuse an autocommit connection: the fence and the write must commit together."""
    raw = _raw(conn)
    if getattr(raw, "autocommit", False) is True or (type(raw).__module__ == "sqlite3"
                                                     and raw.isolation_level is None):
        raise ValueError("the connection autocommits: the fence and the write it guards need one transaction")


_NAMED = re.compile(r"(?<!:):([A-Za-z_]\w*)")


def _dbapi_statement(sql: str, params: dict[str, Any], style: str) -> tuple[str, Any]:
    """`sql`, written with :name parameters, in the driver's parameter style."""
    if style == "named":
        return sql, params
    names = _NAMED.findall(sql)
    if style == "pyformat":
        return _NAMED.sub(r"%(\1)s", sql), params
    marks = {"qmark": lambda n: "?", "format": lambda n: "%s", "numeric": lambda n: f":{names.index(n) + 1}"}[style]
    return _NAMED.sub(lambda m: marks(m.group(1)), sql), [params[n] for n in names]


def _run(conn: Any, sql: str, params: Any, *, named: bool = True, fetch: bool = False) -> Any:
    """Execute one statement; answers its rows when `fetch`, else its row count."""
    if _sqlalchemy(conn):
        from sqlalchemy import text  # only ever reached with SQLAlchemy in hand

        result = conn.execute(text(sql), params or {})
        return result.all() if fetch else result.rowcount
    if named:
        driver = sys.modules[type(conn).__module__.split(".")[0]]
        sql, params = _dbapi_statement(sql, params, getattr(driver, "paramstyle", "named"))
    cursor = conn.cursor()
    try:
        cursor.execute(sql, params) if params is not None else cursor.execute(sql)
        return cursor.fetchall() if fetch else cursor.rowcount
    finally:
        cursor.close()
