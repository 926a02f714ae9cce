"""Statement helpers both databases share: constants written into a statement, paging, and
INSERT … ON CONFLICT in each dialect's spelling."""

from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import ColumnElement, Select, func, literal_column, select
from sqlmodel import Session

from app.db.dialect import Dialect, dialect_of


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


def paginate(session: Session, query: Select, limit: int, offset: int, count_up_to: int | None = None
             ) -> tuple[list[Any], int]:
    """One page of `query` (already ordered) and the total count of its rows: entities when
    it selects one, else rows. With `count_up_to`, rows are counted only that far past the
    page's start (a total above offset + count_up_to means "more"), so the count stays bounded."""
    counted = query.order_by(None)
    if count_up_to is not None:
        counted = counted.limit(offset + count_up_to + 1)
    total = session.execute(select(func.count()).select_from(counted.subquery())).scalar_one()
    rows = session.execute(query.limit(limit).offset(offset))
    return list(rows.scalars() if len(query.column_descriptions) == 1 else rows.all()), total


def paginate_by_key(session: Session, query: Select, key: Any, limit: int, offset: int) -> tuple[list[Any], int]:
    """`paginate` for a deep offset: the page's keys first (`key`, the entity's primary key),
    then their rows. Where an index holds the filter, the order and the key, the keys are an
    index-only walk to the offset, so the rows skipped are never read from the table nor sorted."""
    total = session.execute(select(func.count()).select_from(query.order_by(None).subquery())).scalar_one()
    return page_by_key(session, query, key, limit, offset), total


def page_by_key(session: Session, query: Select, key: Any, limit: int, offset: int) -> list[Any]:
    """paginate_by_key's page alone, for a caller that knows the count."""
    page = query.with_only_columns(key).limit(limit).offset(offset).scalar_subquery()
    return list(session.execute(query.where(key.in_(page))).scalars())


@cache
def _insert_ignoring(dialect: Dialect, table: Any, index_elements: tuple[str, ...]) -> Any:
    return dialect.insert(table).on_conflict_do_nothing(index_elements=index_elements).returning(literal_column("1"))


def insert_ignore(session: Session, table: Any, values: dict[str, Any], index_elements: list[str]) -> bool:
    """INSERT … ON CONFLICT DO NOTHING on either database (the statement built once per table,
    the values bound). True if the row was inserted."""
    stmt = _insert_ignoring(dialect_of(session), table, tuple(index_elements))
    return session.execute(stmt, values).first() is not None


@cache
def _upserting(dialect: Dialect, table: Any, index_elements: tuple[str, ...], columns: tuple[str, ...]) -> Any:
    stmt = dialect.insert(table)
    return stmt.on_conflict_do_update(index_elements=index_elements,
                                      set_={name: stmt.excluded[name] for name in columns})


def upsert_columns(session: Session, table: Any, values: dict[str, Any], index_elements: list[str],
                   columns: list[str]) -> None:
    """INSERT … ON CONFLICT DO UPDATE SET each of `columns` to its value in `values`, the
    statement built once per shape (upsert, for an update that is not of the inserted values)."""
    session.execute(_upserting(dialect_of(session), table, tuple(index_elements), tuple(columns)), values)


def upsert(
    session: Session, table: Any, values: dict[str, Any], index_elements: list[str],
    update: dict[str, Any], where: Any = None,
) -> bool:
    """INSERT … ON CONFLICT DO UPDATE SET `update` [WHERE `where`, judged on the stored row].
    True if a row was inserted or updated; False if `where` kept the stored row."""
    stmt = dialect_of(session).insert(table).values(**values)
    stmt = stmt.on_conflict_do_update(index_elements=index_elements, set_=update, where=where)
    return _wrote(session, stmt)


def _wrote(session: Session, stmt: Any) -> bool:
    """Whether `stmt` wrote a row, told by RETURNING: the rowcount of an ORM-enabled INSERT is
    -1 on psycopg, so it cannot tell."""
    return session.execute(stmt.returning(literal_column("1"))).first() is not None
