"""indexes that serve the lists in their default order, so reads stay flat as history grows

Contract 8: what a list costs does not grow with the history kept. The Airflow task-instance
list's default order is (map_index, dag_id, run_id, task_id): one index in that order for the
whole list, one led by state and one by dag_id for its daily filters, each ending in the id so
that a deep offset walks the index alone (app/db/statements.paginate_by_key). The runs lists
order by created_at (Airflow's oldest first, the dashboard's and the native API's newest
first): (created_at, dag_id, run_id) and (dag_id, created_at, run_id). The dashboard's outcome
chart reads the attempts that ended in the last hour: an index on task_attempts.ended_at.

Expand only: indexes, which the previous release's statements do not need. On PostgreSQL each
is built CONCURRENTLY, outside the chain's transaction, so writers are never blocked on a table
of millions of rows; a build cut short leaves an invalid index, which a rerun drops and builds
again.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None
# Only adds indexes.
expand_only = True

INDEXES = {
    "ix_task_instances_listing": ("task_instances", ["map_index", "dag_id", "run_id", "task_id", "id"]),
    "ix_task_instances_state_listing": ("task_instances", ["state", "map_index", "dag_id", "run_id", "task_id", "id"]),
    "ix_task_instances_dag_listing": ("task_instances", ["dag_id", "map_index", "run_id", "task_id", "id"]),
    "ix_dag_runs_created_at": ("dag_runs", ["created_at", "dag_id", "run_id"]),
    "ix_dag_runs_dag_id_created_at": ("dag_runs", ["dag_id", "created_at", "run_id"]),
    "ix_task_attempts_ended_at": ("task_attempts", ["ended_at"]),
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        for name, (table, columns) in INDEXES.items():
            op.create_index(name, table, columns)
        return
    with op.get_context().autocommit_block():
        for name, (table, columns) in INDEXES.items():
            op.execute(sa.text(f"DROP INDEX CONCURRENTLY IF EXISTS {name}"))  # a build cut short: invalid
            op.create_index(name, table, columns, postgresql_concurrently=True)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        for name, (table, _) in INDEXES.items():
            op.drop_index(name, table_name=table)
        return
    with op.get_context().autocommit_block():
        for name, (table, _) in INDEXES.items():
            op.drop_index(name, table_name=table, postgresql_concurrently=True, if_exists=True)
