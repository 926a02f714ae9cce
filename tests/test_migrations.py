"""The Alembic chain goes up, down and up again on both databases, and the models match it."""

import os
import subprocess
import sys

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect

from app.db import make_engine, metadata
from app.migrate import downgrade, upgrade
from tests.databases import BACKENDS, throwaway_database


def schema_diff(engine: Engine) -> list:
    """What Alembic's autogenerate would write to make the database match the models."""
    with engine.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)


def tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names()) - {"alembic_version"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_up_down_and_up_again(backend, tmp_path):
    with throwaway_database(backend, tmp_path) as url:
        engine = make_engine(url)
        try:
            upgrade(url)
            assert tables(engine) == set(metadata.tables)
            downgrade(url, "base")
            assert tables(engine) == set()
            upgrade(url)
            assert tables(engine) == set(metadata.tables)
            assert schema_diff(engine) == []
        finally:
            engine.dispose()


def test_the_models_match_the_migrated_schema(engine):
    assert schema_diff(engine) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_replicas_migrating_at_once_all_succeed(backend, tmp_path):
    """Several `fenceline migrate` processes on one fresh database, as replicas starting
    together run them: each waits its turn and finds the schema at head."""
    with throwaway_database(backend, tmp_path) as url:
        env = {**os.environ, "FENCELINE_DATABASE_URL": url, "FENCELINE_DATA_DIR": str(tmp_path)}
        env.pop("DATABASE_URL", None)
        procs = [subprocess.Popen([sys.executable, "-m", "app.cli", "migrate"], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(4)]
        results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
        assert [code for code, _ in results] == [0, 0, 0, 0], [err[-500:] for _, err in results]
        engine = make_engine(url)
        try:
            assert schema_diff(engine) == []
        finally:
            engine.dispose()
