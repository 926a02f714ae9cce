"""Engines and their transactions: one code path for SQLite and PostgreSQL
(docs/decisions/0001-two-databases.md).

A writing transaction on SQLite begins IMMEDIATE, so that a read-then-write transaction never
fails half-way on a lock upgrade (writers queue on the busy timeout instead); a reading
transaction begins deferred and read-only on both databases, so reads never queue behind
writers and can never write.
"""

import threading
from typing import Any

from sqlalchemy import Engine, create_engine, event, literal_column, select
from sqlalchemy.exc import DBAPIError

from app.db.dialect import AUTOCOMMIT, READ_ONLY, dialect_of

SQLITE_BUSY_TIMEOUT_MS = 30_000


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
        # between tries: writers that met each other would wait whole sleeps, where a lock
        # hands the turn on as soon as the writer before is done. A statement
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
    return engine.execution_options(**dict(dialect_of(engine).read_only_options))


def single_statements(engine: Engine) -> Engine:
    """The same engine and pool, for requests whose write is one statement (a heartbeat, the
    liveness read): each statement commits on its own, so it costs one round trip to the
    database instead of three (BEGIN, the statement, COMMIT). One statement is atomic on its own;
    only a request that writes once may use it."""
    return engine.execution_options(isolation_level=AUTOCOMMIT)


def database_answers(engine: Engine) -> bool:
    """Whether the database answers a trivial query now."""
    try:
        with engine.connect() as conn:
            conn.execute(select(literal_column("1"))).scalar_one()
        return True
    except DBAPIError:
        return False


