"""the attempt fence: attempt_epoch and the per-epoch attempt record (expand only)

Additive, so replicas still running revision 0002 keep working during a rolling upgrade:
`attempt_epoch` arrives as DEFAULT 0 NOT NULL (a constant default: no table rewrite on
PostgreSQL 11+), on the history first and the hot task_instances table last, each under a
lock timeout so a long transaction makes the migration fail fast rather than queue every
writer behind it. The history's unique key stays (task_instance_id, try_number): the previous
revision's `INSERT … ON CONFLICT (task_instance_id, try_number) DO NOTHING` archive statement
still works (until 0013, a contract migration, swaps the key).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None
# Only adds: a defaulted column and a table; the history's key stays (see above).
expand_only = True


def _lock_timeout() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")


def upgrade() -> None:
    _lock_timeout()
    with op.batch_alter_table("task_instance_history", schema=None) as batch_op:
        batch_op.add_column(sa.Column("attempt_epoch", sa.Integer(), server_default="0", nullable=False))
    op.create_table(
        "task_attempts",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("task_instance_id", sa.Uuid(), nullable=False),
        sa.Column("try_number", sa.Integer(), nullable=False),
        sa.Column("attempt_epoch", sa.Integer(), nullable=False),
        sa.Column("execution_id", sa.Uuid(), nullable=True),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("outcome_kind", sa.String(16), nullable=True),
        sa.Column("reason", sa.String(64), nullable=True),
        sa.Column("user_code_started", sa.Boolean(), nullable=False),
        sa.Column("observed_phase", sa.String(64), nullable=True),
        sa.Column("observed_reason", sa.String(256), nullable=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["task_instance_id"], ["task_instances.id"],
                                name=op.f("fk_task_attempts_task_instance_id_task_instances"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_task_attempts")),
        sa.UniqueConstraint("task_instance_id", "try_number", "attempt_epoch",
                            name=op.f("uq_task_attempts_task_instance_id_try_number_attempt_epoch")),
    )
    with op.batch_alter_table("task_attempts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_task_attempts_task_instance_id"), ["task_instance_id"], unique=False)
    with op.batch_alter_table("task_instances", schema=None) as batch_op:
        batch_op.add_column(sa.Column("attempt_epoch", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    _lock_timeout()
    with op.batch_alter_table("task_instances", schema=None) as batch_op:
        batch_op.drop_column("attempt_epoch")
    op.drop_table("task_attempts")
    with op.batch_alter_table("task_instance_history", schema=None) as batch_op:
        batch_op.drop_column("attempt_epoch")
