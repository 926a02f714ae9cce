"""log stores in the database: log chunks (the database store, and an S3 store's chunk index),
retention's record of removed logs, and an index on runs' end (expand only)

Additive, so replicas still running the previous revision keep working during a rolling upgrade.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None
# Only adds: tables and an index.
expand_only = True


def _lock_timeout() -> None:
    if op.get_bind().dialect.name == "postgresql":  # the dag_runs index: fail fast, never queue writers
        op.execute("SET LOCAL lock_timeout = '5s'")


def upgrade() -> None:
    _lock_timeout()
    op.create_table(
        "log_chunks",
        sa.Column("store", sa.String(512), nullable=False),
        sa.Column("key", sa.String(1024), nullable=False),
        sa.Column("start_offset", sa.BigInteger(), nullable=False),
        sa.Column("end_offset", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=True),
        sa.Column("object_name", sa.String(2048), nullable=True),
        sa.PrimaryKeyConstraint("store", "key", "start_offset", name=op.f("pk_log_chunks")),
    )
    op.create_table(
        "log_removals",
        sa.Column("dag_run_id", sa.Uuid(), nullable=False),
        sa.Column("run_ended_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("removed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["dag_run_id"], ["dag_runs.id"],
                                name=op.f("fk_log_removals_dag_run_id_dag_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("dag_run_id", name=op.f("pk_log_removals")),
    )
    with op.batch_alter_table("log_removals", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_log_removals_run_ended_at"), ["run_ended_at"], unique=False)
    with op.batch_alter_table("dag_runs", schema=None) as batch_op:
        batch_op.create_index("ix_dag_runs_ended_at", ["ended_at"], unique=False)


def downgrade() -> None:
    _lock_timeout()
    with op.batch_alter_table("dag_runs", schema=None) as batch_op:
        batch_op.drop_index("ix_dag_runs_ended_at")
    op.drop_table("log_removals")
    op.drop_table("log_chunks")
