"""Airflow's list filters as SQL over what fenceline's answers show.

A query model (app/airflow/list_params.py) marks each parameter it honours with what it filters
(`Like("dag_id")`, `AnyOf("state")`, `Range("start_date", ">=")`, ...); `conditions` turns the
values a request sent into SQL over a `Shown` map: each Airflow field name, as the answer shows
it, in SQL (None: a field the answer always shows null, which only a `~` pattern matches).
`ordering` does the same for `order_by`. Plain SQLAlchemy: no HTTP here.
"""

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from sqlalchemy import ColumnElement, false, func, or_, true

from app.errors import AppError

Shown = Mapping[str, ColumnElement[Any] | None]
# Airflow 3's "everything" in a pattern, and its alternatives' separator.
EVERYTHING, ALTERNATIVES = "~", "|"


def bad_request(detail: str) -> AppError:
    """400 in the calling Airflow version's shape (app/airflow/v1.py and v2.py render it)."""
    return AppError(400, "bad-request", "Bad request", detail)


def _alternatives(term: str) -> list[str] | None:
    """The alternatives of a pattern, or None when one of them is `~` (everything)."""
    found = term.split(ALTERNATIVES)
    return None if EVERYTHING in found else found


def _escaped(text: str) -> str:
    # `\` is the escape character on both databases (PostgreSQL's default, SQLite's when named),
    # so a backslash in a term is a backslash; `%` and `_` stay wildcards, as in Airflow.
    return text.replace("\\", "\\\\")


def like(column: ColumnElement[Any] | None, term: str) -> ColumnElement[bool]:
    """Airflow 3's `*_pattern`: a case-insensitive substring (ILIKE '%term%', `%` and `_`
    wildcards), `|` between alternatives, `~` for everything. Airflow 2's `dag_id_pattern` is
    the same without `|` and `~`, which no identifier holds."""
    found = _alternatives(term)
    if found is None:
        return true()
    if column is None:
        return false()
    return or_(*(column.ilike(f"%{_escaped(t)}%", escape="\\") for t in found))


def prefix(column: ColumnElement[Any] | None, term: str) -> ColumnElement[bool]:
    """Airflow 3's `*_prefix_pattern`: the value's start, case-sensitive, `%` and `_` literal,
    trailing characters that are not letters or digits dropped (`test_` finds `test...`); `|`
    and `~` as in `like`."""
    found = _alternatives(term)
    if found is None:
        return true()
    if column is None:
        return false()
    conditions = []
    for t in found:
        while t and not t[-1].isalnum():
            t = t[:-1]
        # substr is compared byte for byte on both databases (SQLite's LIKE ignores case).
        conditions.append(func.substr(column, 1, len(t)) == t if t else true())
    return or_(*conditions)


def any_of(column: ColumnElement[Any] | None, values: Sequence[Any]) -> ColumnElement[bool]:
    """The value is one of `values` (a None among them: the value is null)."""
    present = [v for v in values if v is not None]
    if column is None:
        return true() if len(present) < len(values) else false()
    match = column.in_(present) if present else false()
    return or_(match, column.is_(None)) if len(present) < len(values) else match


_COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    ">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


@dataclass(frozen=True)
class Filter:
    """What a query parameter filters: the Airflow field it names (a key of the Shown map)."""

    field: str

    def condition(self, column: ColumnElement[Any] | None, value: Any) -> ColumnElement[bool]:
        raise NotImplementedError


@dataclass(frozen=True)
class Like(Filter):
    def condition(self, column: ColumnElement[Any] | None, value: str) -> ColumnElement[bool]:
        return like(column, value)


@dataclass(frozen=True)
class Prefix(Filter):
    def condition(self, column: ColumnElement[Any] | None, value: str) -> ColumnElement[bool]:
        return prefix(column, value)


@dataclass(frozen=True)
class Equals(Filter):
    def condition(self, column: ColumnElement[Any] | None, value: Any) -> ColumnElement[bool]:
        return any_of(column, [value])


@dataclass(frozen=True)
class AnyOf(Filter):
    """One of a list (Airflow's multi-valued parameters); `translate` maps an Airflow value
    onto the stored values it stands for (a shown state onto native ones)."""

    translate: Callable[[Any], Iterable[Any]] | None = None

    def condition(self, column: ColumnElement[Any] | None, value: Sequence[Any]) -> ColumnElement[bool]:
        return any_of(column, self.condition_values(value))

    def condition_values(self, value: Sequence[Any]) -> list[Any]:
        """The stored values a request's `value` stands for."""
        return [native for v in value for native in self.translate(v)] if self.translate else list(value)


@dataclass(frozen=True)
class Range(Filter):
    """One bound of a range filter (`*_gte`, `*_gt`, `*_lte`, `*_lt`); a null value is outside
    every range, as in SQL."""

    op: str = ">="

    def condition(self, column: ColumnElement[Any] | None, value: Any) -> ColumnElement[bool]:
        return false() if column is None else _COMPARISONS[self.op](column, value)


@dataclass(frozen=True)
class Flag(Filter):
    """A boolean the answer shows as the same value for every row (`is_paused` false): the
    rows shown with that value, which is all of them or none."""

    shown: bool = False

    def condition(self, column: ColumnElement[Any] | None, value: bool) -> ColumnElement[bool]:
        return true() if value == self.shown else false()


@dataclass(frozen=True)
class Never(Filter):
    """A list the answer shows empty for every row (DAG tags, owners): no row has any of the
    values asked for."""

    def condition(self, column: ColumnElement[Any] | None, value: Sequence[Any]) -> ColumnElement[bool]:
        return false()


@dataclass(frozen=True)
class Always(Filter):
    """A parameter whose every value keeps every row (`exclude_stale`: no DAG is stale)."""

    def condition(self, column: ColumnElement[Any] | None, value: Any) -> ColumnElement[bool]:
        return true()


def filters_of(model: type[BaseModel]) -> dict[str, Filter]:
    """The honoured filters of a query model, by parameter name."""
    return {name: marker for name, info in model.model_fields.items()
            for marker in info.metadata if isinstance(marker, Filter)}


def given_filters(params: BaseModel) -> dict[str, tuple[Filter, Any]]:
    """The filters `params` carries a value for (an empty list or None: no filter), by
    parameter name: (its marker, the value)."""
    found = {}
    for name, marker in filters_of(type(params)).items():
        value = getattr(params, name)
        if value is None or (isinstance(value, list | tuple) and not value):
            continue
        found[name] = (marker, value)
    return found


def conditions(params: BaseModel, shown: Shown) -> list[ColumnElement[bool]]:
    """The SQL of every filter `params` carries a value for."""
    return [marker.condition(shown[marker.field], value) for marker, value in given_filters(params).values()]


@dataclass(frozen=True)
class Ordering:
    """What `order_by` may name on one list: each Airflow name and what it orders by (None: a
    field shown null for every row, which orders nothing), the names refused with their reason,
    and the tie-breakers that make the order total."""

    allowed: Mapping[str, ColumnElement[Any] | None]
    tiebreak: Sequence[ColumnElement[Any]]
    refused: Mapping[str, str] | None = None

    def __call__(self, values: Sequence[str]) -> list[ColumnElement[Any]]:
        """ORDER BY terms for `values` (`-name` descending; nulls last ascending, first
        descending, on both databases as on PostgreSQL); 400 naming an unknown or refused one."""
        terms = []
        for value in values:
            name = value.lstrip("-")
            if self.refused and name in self.refused:
                raise bad_request(f"order_by={value}: {self.refused[name]}")
            if name not in self.allowed:
                raise bad_request(f"order_by={value}: not a field this list orders by "
                                  f"(it orders by {', '.join(sorted(self.allowed))}; `-` for descending)")
            column = self.allowed[name]
            if column is not None:
                terms.append(column.desc().nulls_first() if value.startswith("-") else column.asc().nulls_last())
        return [*terms, *self.tiebreak]
