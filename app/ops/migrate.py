"""Running the Alembic chain from code (the CLI and the tests), expand and contract apart
(contract 10; app/fleet/window.py)."""

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TypeVar

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, create_engine, inspect, make_url
from sqlmodel import Session

from app.db.dialect import dialect_for_url
from app.db.types import utcnow
from app.fleet import replicas
from app.fleet.models import Replica
from app.fleet.window import Chain, current_revision, refusal
from app.ops.startup import CONTRACT_REFUSED, SCHEMA_NOT_AT_HEAD, StartupError

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


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
    return None if _never_made(database_url) else _read(database_url, current_revision)


def serving_refusal(database_url: str) -> str | None:
    """Why this release cannot serve the database's schema as it is (one line); None when it can."""
    if _never_made(database_url):
        return refusal(None, chain())
    return _read(database_url, lambda connection: refusal(connection, chain()))


def _read(database_url: str, read: Callable[[Connection], T]) -> T:
    """`read(connection)` on a connection of its own to the database."""
    engine = create_engine(make_url(database_url))
    try:
        with engine.connect() as connection:
            return read(connection)
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
    if contract and waiting_contract is not None and (why := _older_replica_alive(database_url, own)) is not None:
        raise StartupError(CONTRACT_REFUSED, f"not contracting (the migrations from {waiting_contract} on): {why}")
    command.upgrade(alembic_config(database_url, "contract" if contract else "expand"), "head")
    after = schema_revision(database_url)
    if contract and waiting_contract is None:
        return f"nothing to contract: the database schema is at revision {after}, the migrations' head"
    if after == own.head:
        return f"the database schema is at revision {after}, the migrations' head"
    return (f"the database schema is at revision {after}; the contract migration {own.first_contract(after)} and "
            "those after it wait for `fenceline migrate --contract` (docs/upgrades.md)")


def _older_replica_alive(database_url: str, own: Chain) -> str | None:
    """A replica alive whose head is older than the one that may serve the contracted schema
    (one line naming it); None when there is none (replicas of releases before 0012 record
    nothing)."""
    def listing(connection: Connection) -> list[Replica] | None:
        if not inspect(connection).has_table(replicas.REPLICAS.name):
            return None
        with Session(connection) as session:
            return replicas.listing(session=session)

    found, now = _read(database_url, listing), utcnow()
    if found is None:
        return None
    oldest = own.index[own.servable_from(own.head)]
    older = [r for r in found if replicas.alive(r, now) and own.index.get(r.head, oldest) < oldest]
    if not older:
        return None
    r = older[0]
    return (f"{len(older)} replica(s) of an older release alive, e.g. version {r.version} (migrations' head {r.head}) "
            f"on {r.host} pid {r.pid}, seen {(now - r.last_seen_at).total_seconds():.0f}s ago within its liveness "
            f"window of {r.liveness_seconds}s; upgrade or stop them first (GET /v1/admin/replicas lists them)")
