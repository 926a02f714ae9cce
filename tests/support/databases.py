"""Throw-away databases: never the developer's data, always dropped afterwards."""

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, make_url, text

from app.ops.migrate import upgrade

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


@contextmanager
def database_on(directory: Path, backend: str) -> Iterator[str]:
    """A migrated database whose files live in `directory`: a SQLite file, or a PostgreSQL
    database in a tablespace there."""
    if backend == "sqlite":
        url = f"sqlite:///{directory / 'fenceline.db'}"
        upgrade(url)
        yield url
        return
    if make_url(PG_ADMIN_URL).host not in ("127.0.0.1", "localhost"):
        pytest.skip("the PostgreSQL server is not on this machine")
    shutil.chown(directory, "postgres", "postgres")
    name = f"fenceline_full_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN_URL.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE TABLESPACE {name} LOCATION '{directory}'"))
        conn.execute(text(f'CREATE DATABASE "{name}" TABLESPACE {name}'))
    url = str(make_url(PG_ADMIN_URL.replace("postgresql://", "postgresql+psycopg://")).set(database=name))
    try:
        upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f"DROP TABLESPACE IF EXISTS {name}"))
        admin.dispose()
