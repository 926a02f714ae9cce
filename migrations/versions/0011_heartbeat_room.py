"""task instances leave room on their pages for a heartbeat's new row version (PostgreSQL)

A heartbeat rewrites only last_heartbeat_at, which no index holds: PostgreSQL can then keep the
new version on the same page (a HOT update) and touch none of the table's eight indexes, but
only if the page has room. Filled to 100 %, 57 % of a fleet's heartbeats were not HOT
(bench/batches.py, 20,000 attempts): each wrote a new entry into every index (seven times the
WAL) and left dead entries that every scan of the state index then read. At 70 %, 87 % were.
Pages written from now on keep the room; existing ones as their rows move (or at a VACUUM
FULL). SQLite has no such setting: nothing changes there.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None
# Changes only a storage parameter, which no statement reads.
expand_only = True

FILLFACTOR = 70


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")  # fail fast rather than queue writers behind the change
        op.execute(f"ALTER TABLE task_instances SET (fillfactor = {FILLFACTOR})")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
        op.execute("ALTER TABLE task_instances RESET (fillfactor)")
