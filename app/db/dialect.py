"""What differs between SQLite and PostgreSQL, in one object per database
(docs/decisions/0001-two-databases.md).

The domains ask a `Dialect` for a capability (`dialect_of(session).writes_in_ctes`) or a lock
(`dialect_of(session).hold(session, key)`), never which database they run on. SQLite here
is served by one process whose writing transactions take turns (BEGIN IMMEDIATE): what
PostgreSQL needs locks, advisory locks and notifications for, SQLite gets from that.
"""

import json
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    URL,
    Connection,
    Engine,
    String,
    Uuid,
    any_,
    bindparam,
    func,
    make_url,
    select,
    text,
    true,
    type_coerce,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session

# An execution option that marks a reading engine: its transactions begin read-only (SQLite).
READ_ONLY = "fenceline_read_only"
AUTOCOMMIT = "AUTOCOMMIT"

_HOLD = text("SELECT pg_advisory_xact_lock(:k)")
_TRY_HOLD = text("SELECT pg_try_advisory_xact_lock(:k)")
_TRY_LEAD = text("SELECT pg_try_advisory_lock(:k)")
_NO_FLUSH_WAIT = text("SET LOCAL synchronous_commit = off")


@dataclass(frozen=True)
class Dialect:
    """One database's differences. Hashable: statements built once per dialect are cached by it."""

    name: str
    # Writers take turns (SQLite: one process, BEGIN IMMEDIATE): no row, table or advisory lock is
    # needed among them, and there is nobody to skip past (no SKIP LOCKED).
    writers_take_turns: bool
    # One statement may write several tables (WITH … UPDATE/INSERT … RETURNING): PostgreSQL.
    writes_in_ctes: bool
    # Commits are announced to every process (LISTEN/NOTIFY); else only to this process.
    notifies: bool
    # The database is a file opened in place, not a server to wait for.
    file_based: bool
    read_only_options: tuple[tuple[str, Any], ...]

    def insert(self, table: Any) -> Any:
        """This dialect's INSERT of `table` (a model or a Table), which has ON CONFLICT (Core: the
        ORM's bulk insert costs more than it gives)."""
        return (sqlite.insert if self.name == "sqlite" else postgresql.insert)(getattr(table, "__table__", table))

    def for_update(self, stmt: Any, **how: Any) -> Any:
        """`stmt` locking the rows it reads (`how`: with_for_update's arguments) where writers
        run at once; unchanged where they take turns."""
        return stmt if self.writers_take_turns else stmt.with_for_update(**how)

    def hold(self, session: Session, key: int) -> None:
        """Wait for the transaction-level lock `key`, held until the transaction ends."""
        if not self.writers_take_turns:
            session.execute(_HOLD, {"k": key})

    def try_hold(self, session: Session, key: int) -> bool:
        """Take the transaction-level lock `key` if it is free; False if another transaction has it."""
        return self.writers_take_turns or bool(session.execute(_TRY_HOLD, {"k": key}).scalar())

    def try_lead(self, conn: Connection, key: int) -> bool:
        """Take the session-level lock `key` on `conn` (held while the connection lives) if it is
        free: the one process of several that leads. With one writer's process, it always does."""
        return self.writers_take_turns or bool(conn.execute(_TRY_LEAD, {"k": key}).scalar())

    def rows_table(self, name: str, columns: tuple[tuple[str, Any], ...]) -> Any:
        """A table of rows sent as bound values (rows_values gives them), to join a statement
        on (UPDATE … FROM it): the statement is the same for any number of rows. PostgreSQL
        unnests one array per column; SQLite reads one JSON array of rows (json_each)."""
        if self.name == "sqlite":
            each = func.json_each(bindparam(name, type_=String)).table_valued("value")
            return select(*(type_coerce(func.json_extract(each.c.value, f"$[{n}]"), String if kind is Uuid else kind)
                            .label(column) for n, (column, kind) in enumerate(columns))).subquery(name)
        return select(*(func.unnest(bindparam(f"{name}_{column}", type_=postgresql.ARRAY(kind))).label(column)
                        for column, kind in columns)).subquery(name)

    def among_rows(self, column: Any, name: str, columns: tuple[tuple[str, Any], ...]) -> Any:
        """`column` is one of the first column's values of rows_table(name, columns), as an
        index condition: a statement joined on the rows then reads only their rows, however many
        others its other conditions match. PostgreSQL's planner otherwise hashed every such row
        for each statement (every attempt in flight, for a batch's heartbeats); SQLite already
        looks the rows up one by one."""
        if self.name == "sqlite":
            return true()
        first, kind = columns[0]
        return column == any_(bindparam(f"{name}_{first}", type_=postgresql.ARRAY(kind)))

    def rows_values(self, name: str, columns: tuple[tuple[str, Any], ...],
                    rows: list[tuple[Any, ...]]) -> dict[str, Any]:
        """The bound values of rows_table(name, columns) holding `rows`."""
        if self.name == "sqlite":  # a UUID as SQLite stores it: 32 hex digits
            return {name: json.dumps([[v.hex if isinstance(v, uuid.UUID) else v for v in row] for row in rows])}
        return {f"{name}_{column}": [row[n] for row in rows] for n, (column, _) in enumerate(columns)}

    def commit_without_flush_wait(self, session: Session) -> None:
        """Let this transaction's commit answer before its WAL reaches the disk (PostgreSQL's
        asynchronous commit): a crash of the database may then lose the transaction, whole,
        never a part of it. SQLite's commits are left as they are."""
        if self.name == "postgresql":
            session.execute(_NO_FLUSH_WAIT)

    def lock_table(self, session: Session, table: str) -> None:
        """Lock `table` IN EXCLUSIVE MODE until the transaction ends: other writers of it wait,
        plain reads do not."""
        if not self.writers_take_turns:
            session.execute(text(f"LOCK TABLE {table} IN EXCLUSIVE MODE"))


SQLITE = Dialect("sqlite", writers_take_turns=True, writes_in_ctes=False, notifies=False, file_based=True,
                 read_only_options=((READ_ONLY, True),))
POSTGRESQL = Dialect("postgresql", writers_take_turns=False, writes_in_ctes=True, notifies=True, file_based=False,
                     read_only_options=(("postgresql_readonly", True),))
_BY_NAME = {d.name: d for d in (SQLITE, POSTGRESQL)}


def dialect_of(bind: Session | Engine | Connection) -> Dialect:
    """The dialect `bind` (a session, an engine or a connection) talks to."""
    engine = bind.get_bind() if isinstance(bind, Session) else bind
    return _BY_NAME[engine.dialect.name]


def dialect_for_url(url: str) -> Dialect:
    """The dialect a database URL names; ValueError for a database fenceline does not serve."""
    name = make_url(url).get_backend_name()
    if name not in _BY_NAME:
        raise ValueError(f"fenceline stores its state in SQLite or PostgreSQL, not {name}")
    return _BY_NAME[name]


def with_driver(url: str) -> str:
    """`url` naming its driver: a plain postgresql:// (or postgres://) URL means psycopg 3, the
    only PostgreSQL driver installed."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def partial_index(where: Any) -> dict[str, Any]:
    """The keyword arguments of an Index whose rows are those matching `where`, on both databases."""
    return {"postgresql_where": where, "sqlite_where": where}


def libpq_conninfo(url: URL) -> str:
    """A PostgreSQL URL as libpq takes it, for a connection of psycopg's own (the listener's)."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)
