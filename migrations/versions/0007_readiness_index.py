"""an index on task instances by run and state, for readiness after a success (expand only)

Readiness after a success reads the run's waiting task instances and asks whether any of the
run's task instances is unfinished; by (dag_run_id, state) those read only the rows they are
about, not every task instance of the run. Additive: replicas on the previous revision keep
working during a rolling upgrade.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None
# Only adds: an index.
expand_only = True


def _lock_timeout() -> None:
    if op.get_bind().dialect.name == "postgresql":  # fail fast rather than queue writers behind the build
        op.execute("SET LOCAL lock_timeout = '5s'")


def upgrade() -> None:
    _lock_timeout()
    with op.batch_alter_table("task_instances", schema=None) as batch_op:
        batch_op.create_index("ix_task_instances_dag_run_id_state", ["dag_run_id", "state"], unique=False)


def downgrade() -> None:
    _lock_timeout()
    with op.batch_alter_table("task_instances", schema=None) as batch_op:
        batch_op.drop_index("ix_task_instances_dag_run_id_state")
