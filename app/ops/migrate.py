"""Running the Alembic chain from code (the CLI and the tests)."""

from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, make_url

from app.db.dialect import dialect_for_url

ROOT = Path(__file__).resolve().parents[2]


def alembic_config(database_url: str) -> Config:
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    command.downgrade(alembic_config(database_url), revision)


@cache
def head_revision() -> str:
    """The revision the migrations end at (read once: the migrations are part of the code)."""
    return ScriptDirectory.from_config(alembic_config("")).get_current_head()


def schema_revision(database_url: str) -> str | None:
    """The revision the database's schema is at; None for a database never migrated (a SQLite
    file that does not exist is not created)."""
    url = make_url(database_url)
    if dialect_for_url(database_url).file_based and url.database and not Path(url.database).exists():
        return None
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
