"""task instances say whether any task of their run waits on them (expand only)

A success judges readiness of the task's downstream; a task nothing waits on (most of a wide
run) has none, and knowing that spares the success a read of the run's waiting task instances.
Set when the run is created. Existing rows get true, which only means "look", as before; a
replica still on the previous revision creates rows that get true too.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None
# Only adds: a defaulted column.
expand_only = True


def _lock_timeout() -> None:
    if op.get_bind().dialect.name == "postgresql":  # fail fast rather than queue writers behind the change
        op.execute("SET LOCAL lock_timeout = '5s'")


def upgrade() -> None:
    _lock_timeout()
    # A plain ADD COLUMN on both databases: SQLite's batch mode would copy the table (whose
    # dropped original takes the rows of task_instance_history with it, by the foreign key's
    # cascade) and lose the expression index of 0009, which it cannot reflect.
    op.add_column("task_instances", sa.Column("has_downstream", sa.Boolean(), nullable=False,
                                              server_default=sa.text("true")))


def downgrade() -> None:
    _lock_timeout()
    op.drop_column("task_instances", "has_downstream")  # plain, as upgrade's ADD COLUMN (SQLite >= 3.35)
