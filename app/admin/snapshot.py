"""Export and restore of every domain table as one JSON document.

Generic over the metadata, so a table added by a later domain is exported without change
here. Rows are ordered by primary key and values rendered canonically, so that
export -> restore -> export is identical.
"""

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Table, func, insert, select
from sqlmodel import Session

from app import models  # noqa: F401  (registers every table)
from app.db import UTCDateTime, metadata
from app.errors import AppError

FORMAT = "fenceline-snapshot/1"
# Per-installation secrets do not travel with the data.
EXCLUDED = {"installation_secrets", "alembic_version"}


def _tables() -> list[Table]:
    return [t for t in metadata.sorted_tables if t.name not in EXCLUDED]


def _dump(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _load(column: Any, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(column.type, UTCDateTime):
        return datetime.fromisoformat(value)
    if column.type.__class__.__name__ == "Uuid":
        return uuid.UUID(value)
    return value


def export(*, session: Session) -> dict[str, Any]:
    tables: dict[str, list[dict[str, Any]]] = {}
    for table in _tables():
        rows = session.execute(select(table).order_by(*table.primary_key.columns)).mappings()
        tables[table.name] = [{k: _dump(v) for k, v in row.items()} for row in rows]
    return {"format": FORMAT, "tables": tables}


def restore(*, session: Session, document: dict[str, Any]) -> dict[str, int]:
    """Load `document` into an empty database; answers the row count per table."""
    if document.get("format") != FORMAT or not isinstance(document.get("tables"), dict):
        raise AppError(422, "invalid-snapshot", "Invalid snapshot", f"Expected a {FORMAT} document.")
    known = {t.name: t for t in _tables()}
    unknown = set(document["tables"]) - set(known)
    if unknown:
        raise AppError(422, "invalid-snapshot", "Invalid snapshot", f"Unknown tables: {sorted(unknown)}.")
    for table in known.values():
        if session.execute(select(func.count()).select_from(table)).scalar():
            raise AppError(409, "database-not-empty", "Database not empty",
                           f"Restore needs an empty database; table {table.name} has rows.")
    counts: dict[str, int] = {}
    for name, table in known.items():  # dependency order
        rows = document["tables"].get(name, [])
        try:
            loaded = [{c: _load(table.c[c], v) for c, v in row.items()} for row in rows]
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise AppError(422, "invalid-snapshot", "Invalid snapshot", f"Bad row in {name}: {exc!r}.") from exc
        if loaded:
            session.execute(insert(table), loaded)
        counts[name] = len(loaded)
    return counts
