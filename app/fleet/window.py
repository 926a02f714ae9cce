"""How far back a database's schema may be served (contract 10.1).

Every migration module says whether it only adds (`expand_only = True`: a table, a nullable or
defaulted column, an index) or not (it drops, renames, retypes or swaps a key). A release serves
a schema whose migrations past its own head all only add; it cannot know those migrations, so
every migration run records in the database the oldest head that may serve the schema it leaves
(`schema_window`), and a release reads that record for a revision it does not know. A schema
behind a release's head is served when only contract migrations wait: a release's code works
before its own contract migrations (docs/decisions/0011-expand-then-contract.md).
"""

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, delete, insert, inspect, select

from app.db.types import utcnow
from app.fleet.models import SchemaWindow

WINDOW = SchemaWindow.__table__


@dataclass(frozen=True)
class Chain:
    """One release's migrations, oldest first: each revision and whether it only adds."""

    steps: tuple[tuple[str, bool], ...]

    @classmethod
    def of(cls, script: ScriptDirectory) -> "Chain":
        steps = []
        for r in reversed(list(script.walk_revisions())):
            expand_only = getattr(r.module, "expand_only", None)
            if not isinstance(expand_only, bool):
                raise ValueError(f"migration {r.revision} does not say `expand_only = True` or `False`")
            steps.append((r.revision, expand_only))
        return cls(tuple(steps))

    @property
    def head(self) -> str:
        return self.steps[-1][0]

    @cached_property
    def index(self) -> dict[str, int]:
        return {revision: n for n, (revision, _) in enumerate(self.steps)}

    def after(self, revision: str | None) -> tuple[tuple[str, bool], ...]:
        """The migrations past `revision` (one this chain holds, or None for all of them)."""
        return self.steps if revision is None else self.steps[self.index[revision] + 1:]

    def servable_from(self, revision: str) -> str:
        """The oldest head that may serve the schema at `revision`: its latest contract
        migration, else the first migration."""
        upto = self.steps[:self.index[revision] + 1]
        contracts = [r for r, expand_only in upto if not expand_only]
        return contracts[-1] if contracts else upto[0][0]

    def expand_target(self, current: str | None) -> str | None:
        """Where `fenceline migrate` goes from `current`: the last revision before the first
        contract migration waiting (None: nothing to do). A database never migrated goes to the
        head at once: no release serves it yet."""
        if current is None:
            return self.head
        target = current
        for revision, expand_only in self.after(current):
            if not expand_only:
                break
            target = revision
        return None if target == current else target

    def first_contract(self, current: str | None) -> str | None:
        """The first contract migration waiting past `current`, if any."""
        return next((r for r, expand_only in self.after(current) if not expand_only), None)


def current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def record(connection: Connection, chain: Chain) -> None:
    """Write the window of the schema the migrations just left, in their transaction (nothing
    below the revision that made the table)."""
    revision = current_revision(connection)
    if revision is None or not inspect(connection).has_table(WINDOW.name):
        return
    connection.execute(delete(WINDOW))
    connection.execute(insert(WINDOW).values(revision=revision, servable_from=chain.servable_from(revision),
                                             written_at=utcnow()))


def recorded(connection: Connection, revision: str) -> str | None:
    """The oldest head recorded to serve the schema at `revision`; None without such a record."""
    if not inspect(connection).has_table(WINDOW.name):
        return None
    return connection.execute(select(WINDOW.c.servable_from).where(WINDOW.c.revision == revision)).scalar()


def refusal(connection: Connection | None, chain: Chain) -> str | None:
    """Why a release of `chain` cannot serve the database's schema as it is (one line naming both
    revisions); None when it can. No connection: a database never made."""
    current, head = (current_revision(connection) if connection is not None else None), chain.head
    if current == head:
        return None
    if current is None:
        return (f"the database schema is at revision none (never migrated) but this version's migrations end at "
                f"{head}; run `fenceline migrate` (or the migration job) with this version first")
    if current in chain.index:
        waiting = chain.after(current)
        if not any(expand_only for _, expand_only in waiting):
            return None  # only contract migrations wait, which this release's code does without
        step = ("`fenceline migrate --contract` (once no replica of an older release runs)"
                if not waiting[0][1] else "`fenceline migrate` (or the migration job)")
        return (f"the database schema is at revision {current} but this version's migrations end at {head}; "
                f"run {step} with this version first")
    servable_from = recorded(connection, current) if connection is not None else None
    if servable_from in chain.index:
        return None  # a later release's schema, which only added past this release's head
    why = ("it records no window of releases that may serve it" if servable_from is None else
           f"it may be served from revision {servable_from} on (a later release ran a contract migration)")
    return (f"the database schema is at revision {current}, which this version (migrations ending at {head}) "
            f"does not know: {why}; run a release that serves it")


def upgrade_steps(script: ScriptDirectory, chain: Chain, contract: bool) -> Any:
    """The `fn` of Alembic's migration context for `fenceline migrate`: the steps from the
    revision read under the migration lock to the head (`contract`) or to the last revision
    before the first contract migration."""

    def steps(heads: Any, _context: Any) -> Any:
        current = heads[0] if heads else None
        target = chain.head if contract else chain.expand_target(current)
        return [] if target is None or target == current else script._upgrade_revs(target, heads)

    return steps
