"""Engines, transactions, database faults, and the column types shared by every table.

One code path for SQLite and PostgreSQL (docs/decisions/0001-two-databases.md). A writing
transaction on SQLite begins IMMEDIATE, so that a read-then-write transaction never fails
half-way on a lock upgrade (writers queue on the busy timeout instead); a reading transaction
begins deferred and read-only on both databases, so reads never queue behind writers and can
never write.
"""

import enum
import sqlite3
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    JSON,
    ColumnElement,
    DateTime,
    Engine,
    MetaData,
    Select,
    create_engine,
    event,
    func,
    literal_column,
    select,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.types import TypeDecorator
from sqlmodel import Session, SQLModel

# A naming convention before any table exists, so that migrations name constraints alike
# on both databases.
SQLModel.metadata.naming_convention = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata: MetaData = SQLModel.metadata

SQLITE_BUSY_TIMEOUT_MS = 30_000


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator):
    """A timestamp that is always timezone-aware UTC, on both databases."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# JSON on both databases (JSONB would tie queries to PostgreSQL).
JSONType = JSON


# An execution option that marks a reading engine: its transactions begin read-only.
READ_ONLY = "fenceline_read_only"


def make_engine(url: str, *, pool_size: int = 10, max_overflow: int = 20, pool_timeout: float = 30.0) -> Engine:
    """An engine for `url`; the pool figures bound the connections one process opens."""
    pool = {"pool_size": pool_size, "max_overflow": max_overflow, "pool_timeout": pool_timeout}
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **pool)

        @event.listens_for(engine, "connect")
        def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
            # Take transaction control from pysqlite so that BEGIN and SAVEPOINT work.
            dbapi_conn.isolation_level = None
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        # A statement that commits on its own and writes (a heartbeat: `single_statements`
        # below) waits its turn on a lock of the process (one process serves
        # SQLite) instead of in SQLite's busy handler, which sleeps 1, 2, 5, 10, 15, 20 … ms
        # between tries: writers that met each other waited whole sleeps (heartbeats at
        # concurrency 8: p99 106 ms, 17 ms behind the lock, at the same rate). A statement
        # whose turn does not come within the busy timeout goes on without it. (An UPDATE …
        # RETURNING keeps SQLite's lock until its rows are read, just after its turn: the next
        # writer may still meet the busy handler once.)
        turns = threading.Lock()

        @event.listens_for(engine, "before_cursor_execute")
        def _take_turn(conn: Any, _cursor: Any, _statement: str, _params: Any, context: Any, _many: bool) -> None:
            if (context is not None and (context.isupdate or context.isinsert or context.isdelete)
                    and conn.get_execution_options().get("isolation_level") == AUTOCOMMIT):
                context.fenceline_turn = turns.acquire(timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)

        def _end_turn(context: Any) -> None:
            if getattr(context, "fenceline_turn", False):
                context.fenceline_turn = False
                turns.release()

        @event.listens_for(engine, "after_cursor_execute")
        def _turn_done(_conn: Any, _cursor: Any, _statement: str, _params: Any, context: Any, _many: bool) -> None:
            _end_turn(context)

        @event.listens_for(engine, "handle_error")
        def _turn_failed(exception_context: Any) -> None:
            _end_turn(exception_context.execution_context)

        def _query_only(conn: Any, on: bool) -> None:
            # The pragma holds for the connection until it is set again: set it only when it
            # changes (a statement fewer for most requests). A new connection's record starts empty.
            if conn.info.get("fenceline_query_only") is not on:
                conn.exec_driver_sql(f"PRAGMA query_only={'ON' if on else 'OFF'}")
                conn.info["fenceline_query_only"] = on

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn: Any) -> None:
            options = conn.get_execution_options()
            _query_only(conn, bool(options.get(READ_ONLY)))
            if options.get(READ_ONLY):
                conn.exec_driver_sql("BEGIN")
            elif options.get("isolation_level") != AUTOCOMMIT:
                conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    # No ping per checkout (a round trip on every request): a connection the server dropped
    # fails its statement, which is answered 503 connection-lost, and SQLAlchemy then
    # invalidates the whole pool, so the next request connects afresh. Connections are also
    # recycled hourly, before a server or proxy idle timeout can cut them unseen.
    return create_engine(url, pool_recycle=3600, **pool)


def reading(engine: Engine) -> Engine:
    """The same engine and pool, for transactions that only read: deferred on SQLite (no
    write lock taken), and refused any write on both databases."""
    if engine.dialect.name == "postgresql":
        return engine.execution_options(postgresql_readonly=True)
    return engine.execution_options(**{READ_ONLY: True})


AUTOCOMMIT = "AUTOCOMMIT"


def single_statements(engine: Engine) -> Engine:
    """The same engine and pool, for requests whose write is one statement (a heartbeat, the
    liveness read): each statement commits on its own, so it costs one round trip to the
    database instead of three (BEGIN, the statement, COMMIT). One statement is atomic on its own;
    only a request that writes once may use it."""
    return engine.execution_options(isolation_level=AUTOCOMMIT)


def one_statement(session: Session) -> None:
    """The rest of `session`'s transaction, begun here, is one statement that commits on its own
    (single_statements, for one request of an endpoint that otherwise takes a transaction). Call
    it before the session's first statement."""
    session.connection(execution_options={"isolation_level": AUTOCOMMIT})


def written(value: str) -> ColumnElement[str]:
    """A constant (a state's name) written into a statement when it is built: a bound value, or
    a list of them, is rendered again on every run (an expanding IN list cost an idle fleet's
    promotion two thirds of its time), and both databases use a partial index only for a query
    that names its predicate's values."""
    if not all(char.isalnum() or char == "_" for char in value):
        raise ValueError(f"not a name to write into a statement: {value!r}")  # nothing is quoted
    return literal_column(f"'{value}'")


def one_of(column: Any, values: Sequence[str]) -> ColumnElement[bool]:
    """`column IN (…)` over constants, written into the statement (see written) in the order
    given: a partial index's predicate is matched as written (SQLite compares the terms)."""
    return column.in_([written(value) for value in values])


def is_postgres(session_or_engine: Session | Engine) -> bool:
    bind = session_or_engine.get_bind() if isinstance(session_or_engine, Session) else session_or_engine
    return bind.dialect.name == "postgresql"


def database_answers(engine: Engine) -> bool:
    """Whether the database answers a trivial query now."""
    try:
        with engine.connect() as conn:
            conn.execute(select(literal_column("1"))).scalar_one()
        return True
    except DBAPIError:
        return False


def paginate(session: Session, query: Select, limit: int, offset: int) -> tuple[list[Any], int]:
    """One page of `query` (already ordered) and the total count of its rows: entities when
    it selects one, else rows."""
    total = session.execute(select(func.count()).select_from(query.order_by(None).subquery())).scalar_one()
    rows = session.execute(query.limit(limit).offset(offset))
    return list(rows.scalars() if len(query.column_descriptions) == 1 else rows.all()), total


class DatabaseFault(enum.Enum):
    """The database faults a client should hear about as such; any other database error is a
    bug to see (500), not a retry to hide."""

    BUSY = "The database is busy: another transaction holds the lock. Retry the request."
    POOL_TIMEOUT = "No database connection was free in time. Retry the request."
    CONNECTION_LOST = "The connection to the database was lost or refused. Retry the request."
    FULL = "The database's storage is full; nothing was written."

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
    if sqlstate == "53100":  # disk_full
        return DatabaseFault.FULL
    if sqlstate == "55P03":  # lock_not_available (lock_timeout)
        return DatabaseFault.BUSY
    if exc.connection_invalidated or sqlstate in _PG_LOST or sqlstate.startswith("08"):
        return DatabaseFault.CONNECTION_LOST
    if not sqlstate and type(orig).__name__ == "OperationalError":  # refused before any SQLSTATE
        return DatabaseFault.CONNECTION_LOST
    return None


def _dialect_insert(session: Session, table: Any) -> Any:
    if is_postgres(session):
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(getattr(table, "__table__", table))  # Core: the ORM's bulk insert costs more than it gives


@cache
def _insert_ignoring(postgres: bool, table: Any, index_elements: tuple[str, ...]) -> Any:
    from sqlalchemy.dialects import postgresql, sqlite

    insert = postgresql.insert if postgres else sqlite.insert
    return (insert(getattr(table, "__table__", table)).on_conflict_do_nothing(index_elements=index_elements)
            .returning(literal_column("1")))


def insert_ignore(session: Session, table: Any, values: dict[str, Any], index_elements: list[str]) -> bool:
    """INSERT … ON CONFLICT DO NOTHING on either database (the statement built once per table,
    the values bound). True if the row was inserted."""
    stmt = _insert_ignoring(is_postgres(session), table, tuple(index_elements))
    return session.execute(stmt, values).first() is not None


@cache
def _upserting(postgres: bool, table: Any, index_elements: tuple[str, ...], columns: tuple[str, ...]) -> Any:
    from sqlalchemy.dialects import postgresql, sqlite

    stmt = (postgresql.insert if postgres else sqlite.insert)(getattr(table, "__table__", table))
    return stmt.on_conflict_do_update(index_elements=index_elements,
                                      set_={name: stmt.excluded[name] for name in columns})


def upsert_columns(session: Session, table: Any, values: dict[str, Any], index_elements: list[str],
                   columns: list[str]) -> None:
    """INSERT … ON CONFLICT DO UPDATE SET each of `columns` to its value in `values`, the
    statement built once per shape (upsert, for an update that is not of the inserted values)."""
    session.execute(_upserting(is_postgres(session), table, tuple(index_elements), tuple(columns)), values)


def upsert(
    session: Session, table: Any, values: dict[str, Any], index_elements: list[str],
    update: dict[str, Any], where: Any = None,
) -> bool:
    """INSERT … ON CONFLICT DO UPDATE SET `update` [WHERE `where`, judged on the stored row].
    True if a row was inserted or updated; False if `where` kept the stored row."""
    stmt = _dialect_insert(session, table).values(**values)
    stmt = stmt.on_conflict_do_update(index_elements=index_elements, set_=update, where=where)
    return _wrote(session, stmt)


def _wrote(session: Session, stmt: Any) -> bool:
    """Whether `stmt` wrote a row, told by RETURNING: the rowcount of an ORM-enabled INSERT is
    -1 on psycopg, so it cannot tell."""
    return session.execute(stmt.returning(literal_column("1"))).first() is not None
