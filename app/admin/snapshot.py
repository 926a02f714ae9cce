"""Export and restore of every domain table as one JSON document.

Generic over the metadata, so a table added by a later domain is exported without change
here. Rows are ordered by primary key and values rendered canonically, so that
export -> restore -> export is identical.
"""

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError
from sqlalchemy import Table, Uuid, delete, func, insert, select
from sqlalchemy.exc import OperationalError, StatementError
from sqlmodel import Session

from app import models  # noqa: F401  (registers every table)
from app.admin.consistency import contradictions
from app.db.types import UTCDateTime, metadata
from app.errors import AppError
from app.identity.schemas import Labels, SeatName
from app.orchestration.routes import DEFAULT_POOL, PriorityWeight, RouteName
from app.orchestration.schemas import Ident, Payload, RunId
from app.orchestration.states import AttemptState, State
from app.routing.models import Pool
from app.routing.schemas import Slots
from app.web.schemas import FreeForm, unstorable

FORMAT = "fenceline-snapshot/1"
# Per-installation secrets and the login throttle's counts do not travel with the data, and
# logs stay out: they live in the log store (even when that is the database), and
# `fenceline logs copy` moves them. The schema window and the replicas describe the deployment.
# The kept counts follow the task instances restored (migration 0015's triggers keep them).
EXCLUDED = {"installation_secrets", "login_failures", "alembic_version", "log_chunks", "schema_window", "replicas",
            "task_instance_counts", "task_instance_count_deltas"}
# The API's validators of what a client writes, applied to the same columns of a restored row
# (a snapshot is untrusted input): identifiers (they become log paths and URLs), free-form
# fields, the payload a worker is handed, labels, the bounded numbers, and every state and kind
# the code reads back as one of a fixed set. A row that passed them cannot make a later read or
# claim fail.
RUN_STATE = Literal["running", "success", "failed"]
FAILURE_KIND = Literal["app", "infra"] | None
OUTCOME_KIND = Literal["success", "app", "infra", "rescheduled"] | None
Count = Annotated[int, Field(ge=0, le=2**31 - 1, strict=True)]
RULES: dict[str, dict[str, TypeAdapter[Any]]] = {
    table: {column: TypeAdapter(kind) for column, kind in columns.items()}
    for table, columns in {
        "dag_runs": {"dag_id": Ident, "run_id": RunId, "conf": FreeForm, "state": RUN_STATE},
        "task_instances": {"dag_id": Ident, "run_id": RunId, "task_id": Ident, "upstream_task_ids": list[Ident],
                           "queue": RouteName, "pool": RouteName, "payload": Payload, "state": State,
                           "last_failure_kind": FAILURE_KIND, "priority_weight": PriorityWeight,
                           "pool_slots": Slots, "try_number": Count, "max_tries": Count, "attempt_epoch": Count,
                           "infra_attempts": Count, "retries": Count, "max_infra_attempts": Count},
        "task_instance_history": {"state": State, "last_failure_kind": FAILURE_KIND, "try_number": Count,
                                  "attempt_epoch": Count, "infra_attempts": Count},
        "task_attempts": {"state": AttemptState, "outcome_kind": OUTCOME_KIND, "try_number": Count,
                          "attempt_epoch": Count},
        "pools": {"name": RouteName, "slots": Slots},
        "seats": {"name": SeatName, "labels": Labels},
        "executions": {"seat": SeatName, "labels": Labels},
    }.items()
}
SHOWN = 20  # offending rows named in the detail
# Rows the migrations seed (Airflow's default pool): a database holding only them is empty.
SEEDED = {Pool.__tablename__: Pool.name != DEFAULT_POOL}


def _unseeded(table: Table) -> list[Any]:
    return [SEEDED[table.name]] if table.name in SEEDED else []


def _tables() -> list[Table]:
    return [t for t in metadata.sorted_tables if t.name not in EXCLUDED]


def _dump(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _load(column: Any, value: Any) -> Any:
    """The stored value of `value` in `column`; ValueError or TypeError when it does not fit
    (SQLite would store a string in an integer column without a word)."""
    if value is None:
        return None
    if isinstance(column.type, UTCDateTime):
        value = datetime.fromisoformat(value)
        if value.tzinfo is None:
            raise ValueError(f"{column.name} must carry a timezone")
        return value
    if isinstance(column.type, Uuid):
        return uuid.UUID(value)
    try:
        expected = column.type.python_type
    except NotImplementedError:
        return value
    if expected in (int, str, bool) and type(value) is not expected:
        raise TypeError(f"{column.name} must be {expected.__name__}")
    return value


def export(*, session: Session) -> dict[str, Any]:
    tables: dict[str, list[dict[str, Any]]] = {}
    for table in _tables():
        rows = session.execute(select(table).order_by(*table.primary_key.columns)).mappings()
        tables[table.name] = [{k: _dump(v) for k, v in row.items()} for row in rows]
    return {"format": FORMAT, "tables": tables}


def _offending(name: str, rows: Any) -> list[str]:
    """Where the rows of table `name` break a rule the API holds its input to."""
    if not isinstance(rows, list):
        return []  # said by the load below
    found = []
    for n, row in enumerate(rows):
        if not isinstance(row, dict):
            continue
        if why := unstorable(row, ""):
            found.append(f"{name}[{n}]: {why}")
        for column, rule in RULES.get(name, {}).items():
            if column not in row:
                continue  # the column's default, or the load below names it missing
            try:
                rule.validate_python(row[column])
            except ValidationError as exc:
                found.append(f"{name}[{n}].{column}: {exc.errors()[0]['msg']}")
    return found


def _named(why: str, rows: list[str]) -> str:
    more = f" (and {len(rows) - SHOWN} more)" if len(rows) > SHOWN else ""
    return f"{why}: {'; '.join(rows[:SHOWN])}{more}."


def restore(*, session: Session, document: dict[str, Any]) -> dict[str, int]:
    """Load `document` into an empty database; answers the row count per table. Every row is
    held to the API's rules first, and the rows to each other (app/admin/consistency.py): one
    that breaks them refuses the whole document, every such row named."""
    if document.get("format") != FORMAT or not isinstance(document.get("tables"), dict):
        raise AppError(422, "invalid-snapshot", "Invalid snapshot", f"Expected a {FORMAT} document.")
    known = {t.name: t for t in _tables()}
    unknown = set(document["tables"]) - set(known)
    if unknown:
        raise AppError(422, "invalid-snapshot", "Invalid snapshot", f"Unknown tables: {sorted(unknown)}.")
    offending = [where for name, rows in document["tables"].items() for where in _offending(name, rows)]
    contradicting = contradictions(document["tables"])
    if offending or contradicting:
        raise AppError(422, "invalid-snapshot", "Invalid snapshot",
                       " ".join(_named(why, rows) for why, rows in (("Rows break the API's rules", offending),
                                                                    ("Rows contradict each other", contradicting))
                                if rows), rows=offending + contradicting)
    for table in known.values():
        if session.execute(select(func.count()).select_from(table).where(*_unseeded(table))).scalar():
            raise AppError(409, "database-not-empty", "Database not empty",
                           f"Restore needs an empty database; table {table.name} has rows.")
    counts: dict[str, int] = {}
    for name, table in known.items():  # dependency order
        rows = document["tables"].get(name, [])
        if name in SEEDED and rows:  # the document's own rows replace what the migrations seeded
            session.execute(delete(table))
        try:
            loaded = [{c: _load(table.c[c], v) for c, v in row.items()} for row in rows]
            if loaded:
                session.execute(insert(table), loaded)
        except OperationalError:
            raise  # the database, not the document: a retryable 503
        except (KeyError, ValueError, TypeError, AttributeError, StatementError) as exc:
            # A missing column, a duplicate key or a value the column cannot hold: the
            # request rolls back whole, so nothing half-restored survives.
            detail = exc.orig if isinstance(exc, StatementError) else exc
            raise AppError(422, "invalid-snapshot", "Invalid snapshot", f"Bad row in {name}: {detail!r}.") from exc
        counts[name] = len(loaded)
    return counts
