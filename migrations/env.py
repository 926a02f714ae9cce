"""Alembic environment: one chain for SQLite and PostgreSQL (batch mode on SQLite)."""

import time

from alembic import context
from sqlalchemy import text

from app import models  # noqa: F401  (registers every table)
from app.config import get_settings
from app.db.engine import make_engine
from app.db.types import metadata
from app.fleet import window

config = context.config
MIGRATION_LOCK_KEY = 0x66656E6D6967  # "fenmig"
LOCK_POLL_SECONDS = 0.2


def render_item(type_: str, obj: object, autogen_context: object) -> str | bool:
    """Render app column types as plain SQLAlchemy ones, so revisions never import the app."""
    if type_ == "type":
        name = type(obj).__name__
        if name == "AutoString":
            length = getattr(obj, "length", None)
            return f"sa.String({length})" if length else "sa.String()"
        if name == "UTCDateTime":
            return "sa.DateTime(timezone=True)"
    return False


def run_migrations_online() -> None:
    url = config.attributes.get("database_url") or get_settings().resolved_database_url
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            postgres = connection.dialect.name == "postgresql"
            if postgres:
                # Replicas that start together migrate one after another (on SQLite, the
                # chain's one BEGIN IMMEDIATE transaction serialises them). They poll rather than
                # wait in pg_advisory_lock: a waiting statement holds a snapshot, and CREATE INDEX
                # CONCURRENTLY in the migrating replica waits for every older snapshot to end.
                lock = text("SELECT pg_try_advisory_lock(:k)")
                while not connection.execute(lock, {"k": MIGRATION_LOCK_KEY}).scalar():
                    connection.commit()
                    time.sleep(LOCK_POLL_SECONDS)
                connection.commit()
            else:
                # Batch mode copies a table and drops the original: with foreign keys enforced,
                # that drop would delete the rows that reference it (ON DELETE CASCADE). Set
                # outside the transaction, where SQLite honours it; the engine's next connection
                # enforces them again.
                connection.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")
            chain = window.Chain.of(context.script)
            plan = config.attributes.get("plan")  # "expand" or "contract" from `fenceline migrate`
            steps = {} if plan is None else {"fn": window.upgrade_steps(context.script, chain, plan == "contract")}
            context.configure(
                connection=connection,
                target_metadata=metadata,
                render_as_batch=connection.dialect.name == "sqlite",
                # SQLite's DDL is transactional, though Alembic assumes not and would commit each
                # revision apart: one transaction (BEGIN IMMEDIATE) for the whole chain, from the
                # read of the current revision on, is what serialises migrators starting together.
                transactional_ddl=True,
                compare_type=True,
                render_item=render_item,
                **steps,
            )
            with context.begin_transaction():
                context.run_migrations()
                # How far back the schema left may be served, in the same transaction (contract 10.1).
                window.record(connection, chain)
            if postgres:
                connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK_KEY})
                connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("fenceline migrations run online only")
run_migrations_online()
