"""Throw-away databases: never the developer's data, always dropped afterwards."""

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from sqlalchemy import Engine

from app.db.types import metadata
from app.orchestration.routes import DEFAULT_POOL
from app.routing.models import DEFAULT_POOL_SLOTS, Pool
from tests.support.counts import KEPT_COUNTS

MIGRATED_DEFAULT_POOL = {"name": DEFAULT_POOL, "slots": DEFAULT_POOL_SLOTS, "description": "Default pool"}

PG_ADMIN_URL = os.environ.get("FENCELINE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
BACKENDS = os.environ.get("FENCELINE_TEST_BACKENDS", "sqlite,postgresql").split(",")


@contextmanager
def throwaway_database(backend: str, directory: Path | None = None, prefix: str = "fenceline_test") -> Iterator[str]:
    """A new, empty database of `backend` (not migrated); answers its SQLAlchemy URL. A
    PostgreSQL database is named `prefix` and a random suffix; a SQLite file goes in `directory`
    (a test's tmp_path), which the caller cleans up."""
    if backend == "sqlite":
        assert directory is not None, "a SQLite database needs a directory"
        yield f"sqlite:///{directory / f'fenceline-{uuid.uuid4().hex[:12]}.db'}"
        return
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def libpq_url(url: str) -> str:
    """A PostgreSQL URL of throwaway_database as libpq (psycopg.connect) takes it."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def empty_tables(engine: Engine) -> None:
    """Every table of a migrated database emptied, but for what the migrations seed (the tests'
    isolation: cheaper than a new database, and races still get real connections)."""
    # The kept counts last: deleting task instances appends their deltas (migration 0015).
    tables = sorted(reversed(metadata.sorted_tables), key=lambda t: t.name in KEPT_COUNTS)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            # DELETE, not TRUNCATE: a TRUNCATE of every table makes new files for each (0.2 s a
            # test), a DELETE of a test's few rows takes a millisecond; in one round trip.
            conn.exec_driver_sql("; ".join(f'DELETE FROM "{t.name}"' for t in tables))
        else:
            for table in tables:
                conn.execute(table.delete())
        conn.execute(Pool.__table__.insert().values(**MIGRATED_DEFAULT_POOL))  # what the migration seeds
