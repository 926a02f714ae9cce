"""routing: task instances name a queue, a pool with its slots and a priority weight, and carry
their run's tenant; pools
(with Airflow's default_pool of 128 slots) and tenants (caps and claim turns) (expand only)

Additive: existing task instances get queue `default`, pool `default_pool`, 1 slot and weight 1
from the server defaults, and their run's tenant_id, so replicas still running the previous
revision keep creating task instances the claim can route (a task instance such a replica
creates has no tenant_id: until the rollout ends it counts as the no-tenant tenant).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None
# Only adds: tables and defaulted or nullable columns (see above).
expand_only = True


def _lock_timeout() -> None:
    if op.get_bind().dialect.name == "postgresql":  # task_instances' new columns: fail fast, never queue writers
        op.execute("SET LOCAL lock_timeout = '5s'")


def upgrade() -> None:
    _lock_timeout()
    pools = op.create_table(
        "pools",
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("description", sa.String(1024), nullable=False, server_default=""),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_pools")),
    )
    op.bulk_insert(pools, [{"name": "default_pool", "slots": 128, "description": "Default pool"}])
    op.create_table(
        "tenants",
        sa.Column("tenant_id", sa.String(250), nullable=False),
        sa.Column("max_running", sa.Integer(), nullable=True),
        sa.Column("last_claimed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", name=op.f("pk_tenants")),
    )
    with op.batch_alter_table("task_instances", schema=None) as batch_op:
        batch_op.add_column(sa.Column("queue", sa.String(256), nullable=False, server_default="default"))
        batch_op.add_column(sa.Column("pool", sa.String(256), nullable=False, server_default="default_pool"))
        batch_op.add_column(sa.Column("pool_slots", sa.Integer(), nullable=False, server_default="1"))
        batch_op.add_column(sa.Column("priority_weight", sa.Integer(), nullable=False, server_default="1"))
        batch_op.add_column(sa.Column("tenant_id", sa.String(250), nullable=True))
        # One index serves the claim: ready work per queue and pool, and the slots in flight per
        # pool (queued and running are few). Each more index on `state` costs every rail a write.
        batch_op.create_index("ix_task_instances_state_queue_pool", ["state", "queue", "pool"], unique=False)
    # The run's tenant, copied so that the claim ranks ready work without joining its runs.
    op.execute("UPDATE task_instances SET tenant_id = "
               "(SELECT dag_runs.tenant_id FROM dag_runs WHERE dag_runs.id = task_instances.dag_run_id)")


def downgrade() -> None:
    _lock_timeout()
    with op.batch_alter_table("task_instances", schema=None) as batch_op:
        batch_op.drop_index("ix_task_instances_state_queue_pool")
        batch_op.drop_column("tenant_id")
        batch_op.drop_column("priority_weight")
        batch_op.drop_column("pool_slots")
        batch_op.drop_column("pool")
        batch_op.drop_column("queue")
    op.drop_table("tenants")
    op.drop_table("pools")
