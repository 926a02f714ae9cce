"""Running the Alembic chain from code (the CLI and the tests), expand and contract apart
(contract 10; app/fleet/window.py)."""

from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, make_url

from app.db.dialect import dialect_for_url
from app.fleet.window import Chain, current_revision, refusal
from app.ops.startup import SCHEMA_NOT_AT_HEAD, StartupError

ROOT = Path(__file__).resolve().parents[2]


def alembic_config(database_url: str, plan: str | None = None) -> Config:
    """Alembic's configuration for `database_url`; `plan` "expand" or "contract" makes an
    upgrade stop before the first contract migration, or not (migrations/env.py)."""
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.attributes["database_url"] = database_url
    config.attributes["plan"] = plan
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Every migration to `revision`, contract ones included (the tests, a fresh database)."""
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    command.downgrade(alembic_config(database_url), revision)


@cache
def chain() -> Chain:
    """This release's migrations (read once: the migrations are part of the code)."""
    return Chain.of(ScriptDirectory.from_config(alembic_config("")))


def head_revision() -> str:
    return chain().head


def _never_made(database_url: str) -> bool:
    """A SQLite file that does not exist (not to be created by a look)."""
    url = make_url(database_url)
    return bool(dialect_for_url(database_url).file_based and url.database and not Path(url.database).exists())


def schema_revision(database_url: str) -> str | None:
    """The revision the database's schema is at; None for a database never migrated (a SQLite
    file that does not exist is not created)."""
    if _never_made(database_url):
        return None
    engine = create_engine(make_url(database_url))
    try:
        with engine.connect() as connection:
            return current_revision(connection)
    finally:
        engine.dispose()


def serving_refusal(database_url: str) -> str | None:
    """Why this release cannot serve the database's schema as it is (one line); None when it can."""
    if _never_made(database_url):
        return refusal(None, chain())
    engine = create_engine(make_url(database_url))
    try:
        with engine.connect() as connection:
            return refusal(connection, chain())
    finally:
        engine.dispose()


def migrate(database_url: str, *, contract: bool = False) -> str:
    """`fenceline migrate`: the expand-only migrations up to the first contract one (`contract`:
    every migration). Answers what was done, in one line; StartupError(5) for a schema this
    release cannot serve without migrations it does not have."""
    current, own = schema_revision(database_url), chain()
    if current is not None and current not in own.index:
        if (why := serving_refusal(database_url)) is not None:
            raise StartupError(SCHEMA_NOT_AT_HEAD, why)
        return (f"the database schema is at revision {current}, a later release's, which this version (migrations "
                f"ending at {own.head}) serves as it is; nothing to migrate")
    waiting_contract = own.first_contract(current) if current is not None else None
    command.upgrade(alembic_config(database_url, "contract" if contract else "expand"), "head")
    after = schema_revision(database_url)
    if contract and waiting_contract is None:
        return f"nothing to contract: the database schema is at revision {after}, the migrations' head"
    if after == own.head:
        return f"the database schema is at revision {after}, the migrations' head"
    return (f"the database schema is at revision {after}; the contract migration {own.first_contract(after)} and "
            "those after it wait for `fenceline migrate --contract` (docs/upgrades.md)")
