"""runs, task instances and their try history, as they were before the attempt fence

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None
# Only adds: tables.
expand_only = True


def upgrade() -> None:
    op.create_table(
        "dag_runs",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("tenant_id", sa.String(250), nullable=True),
        sa.Column("trace_id", sa.String(64), nullable=False),
        sa.Column("conf", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dag_runs")),
        sa.UniqueConstraint("dag_id", "run_id", name=op.f("uq_dag_runs_dag_id_run_id")),
    )
    op.create_table(
        "task_instances",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("dag_run_id", sa.Uuid(), nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("run_id", sa.String(250), nullable=False),
        sa.Column("task_id", sa.String(250), nullable=False),
        sa.Column("map_index", sa.Integer(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("upstream_task_ids", sa.JSON(), nullable=False),
        sa.Column("retries", sa.Integer(), nullable=False),
        sa.Column("retry_delay_seconds", sa.Float(), nullable=False),
        sa.Column("max_infra_attempts", sa.Integer(), nullable=False),
        sa.Column("idempotent", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("max_tries", sa.Integer(), nullable=False),
        sa.Column("infra_attempts", sa.Integer(), nullable=False),
        sa.Column("last_failure_kind", sa.String(8), nullable=True),
        sa.Column("last_failure_reason", sa.String(64), nullable=True),
        sa.Column("execution_id", sa.Uuid(), nullable=True),
        sa.Column("user_code_started", sa.Boolean(), nullable=False),
        sa.Column("next_eligible_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["dag_run_id"], ["dag_runs.id"], name=op.f("fk_task_instances_dag_run_id_dag_runs"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_instances")),
        sa.UniqueConstraint("dag_id", "run_id", "task_id", "map_index",
                            name=op.f("uq_task_instances_dag_id_run_id_task_id_map_index")),
    )
    with op.batch_alter_table("task_instances", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_task_instances_dag_run_id"), ["dag_run_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_task_instances_execution_id"), ["execution_id"], unique=False)
        batch_op.create_index("ix_task_instances_state_next_eligible_at", ["state", "next_eligible_at"], unique=False)
    op.create_table(
        "task_instance_history",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("task_instance_id", sa.Uuid(), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("infra_attempts", sa.Integer(), nullable=False),
        sa.Column("last_failure_kind", sa.String(8), nullable=True),
        sa.Column("last_failure_reason", sa.String(64), nullable=True),
        sa.Column("execution_id", sa.Uuid(), nullable=True),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["task_instance_id"], ["task_instances.id"],
                                name=op.f("fk_task_instance_history_task_instance_id_task_instances"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_instance_history")),
        # The archive statement's ON CONFLICT target: one row per try.
        sa.UniqueConstraint("task_instance_id", "try_number",
                            name=op.f("uq_task_instance_history_task_instance_id_try_number")),
    )
    with op.batch_alter_table("task_instance_history", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_task_instance_history_task_instance_id"), ["task_instance_id"],
                              unique=False)


def downgrade() -> None:
    op.drop_table("task_instance_history")
    op.drop_table("task_instances")
    op.drop_table("dag_runs")
