"""The Alembic chain goes up, down and up again on both databases, and the models match it."""

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
