"""the history's unique key per epoch: (task_instance_id, try_number, attempt_epoch) (contract)

The first contract migration (docs/upgrades.md, docs/decisions/0011-expand-then-contract.md):
task_instance_history's unique key (task_instance_id, try_number) becomes (task_instance_id,
try_number, attempt_epoch), the key of the per-epoch history rows the design promises for a later
release. Not expand-only: releases before this one archive a try with `INSERT … ON CONFLICT
(task_instance_id, try_number) DO NOTHING`, which fails once no unique key has those columns, so
`fenceline migrate` stops before it and `fenceline migrate --contract` applies it once no replica
of an older release is alive. This release's archive statement names no conflict target and
writes one row per try under either key, so it serves the schema before and after.

Going down recreates the old key. Per-try rows are unique as long as a try has one row, which is
all this release writes; a later release's per-epoch rows would break the old key, so the way
down first deletes every row of a try but its latest epoch's (the row reads show for the try).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None
# Swaps a key: older releases' archive statement names the old one in its ON CONFLICT.
expand_only = False

TABLE = "task_instance_history"
PER_TRY = ("task_instance_id", "try_number")
PER_EPOCH = (*PER_TRY, "attempt_epoch")


def _name(columns: tuple[str, ...]) -> str:
    return op.f(f"uq_{TABLE}_{'_'.join(columns)}")  # the metadata's naming convention


def _lock_timeout() -> None:
    """On PostgreSQL a long transaction makes the migration fail fast rather than queue every
    writer of the history behind it."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")


def _swap(old: tuple[str, ...], new: tuple[str, ...]) -> None:
    """Drop the unique key on `old` and make one on `new` (a table copy in SQLite's batch mode,
    which reflects the history alone: task_instances, which its foreign key names, has an
    expression index SQLite's reflection cannot read and warns about)."""
    with op.batch_alter_table(TABLE, schema=None, reflect_kwargs={"resolve_fks": False}) as batch_op:
        batch_op.drop_constraint(_name(old), type_="unique")
        batch_op.create_unique_constraint(_name(new), list(new))


def upgrade() -> None:
    _lock_timeout()
    _swap(PER_TRY, PER_EPOCH)


def downgrade() -> None:
    _lock_timeout()
    # A try's rows but the one of its latest epoch (only a later release writes several).
    op.execute(f"DELETE FROM {TABLE} WHERE EXISTS (SELECT 1 FROM {TABLE} AS later "
               f"WHERE later.task_instance_id = {TABLE}.task_instance_id AND later.try_number = {TABLE}.try_number "
               f"AND later.attempt_epoch > {TABLE}.attempt_epoch)")
    _swap(PER_EPOCH, PER_TRY)
