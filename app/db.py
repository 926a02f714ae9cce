"""Engine, sessions, and the column types shared by every table.

One code path for SQLite and PostgreSQL (docs/decisions/0001-two-databases.md). SQLite
transactions begin IMMEDIATE so that a read-then-write transaction never fails half-way on a
lock upgrade; writers queue on the busy timeout instead.
"""

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Depends, Request
from sqlalchemy import JSON, DateTime, Engine, MetaData, create_engine, event, literal_column
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


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

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

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    return create_engine(url, pool_size=10, max_overflow=40, pool_pre_ping=True)


def is_postgres(session_or_engine: Session | Engine) -> bool:
    bind = session_or_engine.get_bind() if isinstance(session_or_engine, Session) else session_or_engine
    return bind.dialect.name == "postgresql"


def get_session(request: Request) -> Iterator[Session]:
    """One transaction per request, committed when the endpoint returns, before the
    response is sent: a failed commit becomes a 5xx, never a 200 for a lost write."""
    with Session(request.app.state.engine, expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


SessionDep = Annotated[Session, Depends(get_session, scope="function")]


def _dialect_insert(session: Session, table: Any) -> Any:
    if is_postgres(session):
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


def insert_ignore(session: Session, table: Any, values: dict[str, Any], index_elements: list[str]) -> bool:
    """INSERT … ON CONFLICT DO NOTHING on either database. True if the row was inserted."""
    stmt = _dialect_insert(session, table).values(**values).on_conflict_do_nothing(index_elements=index_elements)
    return _wrote(session, stmt)


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
