"""the claim's partial indexes: ready work by group in claim order, and the slots in flight

`ix_task_instances_ready` holds only scheduled task instances, by (queue, pool, tenant) and then
in claim order (priority, oldest), so that a claim walks the groups of ready work and takes each
group's first task from the index instead of sorting the backlog. `ix_task_instances_in_flight`
holds only queued and running ones, by pool, for the slots in flight. Both are partial: a rail's
UPDATE writes to them only when its row enters their states. They replace the
(state, queue, pool) index, which a replica still on the previous revision does not need to
stay correct (its claim reads by the (state, next_eligible_at) index until the rollout ends).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None
# Adds two indexes and drops one that no statement of the previous revision needs to stay
# correct (see above): the previous release serves this schema as it served its own.
expand_only = True


def _lock_timeout() -> None:
    if op.get_bind().dialect.name == "postgresql":  # fail fast rather than queue writers behind the build
        op.execute("SET LOCAL lock_timeout = '5s'")


def _where(predicate: str) -> dict[str, sa.TextClause]:
    return {"postgresql_where": sa.text(predicate), "sqlite_where": sa.text(predicate)}


def upgrade() -> None:
    _lock_timeout()
    with op.batch_alter_table("task_instances", schema=None) as batch_op:
        batch_op.create_index(
            "ix_task_instances_ready",
            ["queue", "pool", sa.text("coalesce(tenant_id, '')"), sa.text("priority_weight DESC"), "updated_at", "id"],
            unique=False, **_where("state = 'scheduled'"))
        batch_op.create_index("ix_task_instances_in_flight", ["pool"], unique=False,
                              **_where("state IN ('queued', 'running')"))
        batch_op.drop_index("ix_task_instances_state_queue_pool")


def downgrade() -> None:
    _lock_timeout()
    with op.batch_alter_table("task_instances", schema=None) as batch_op:
        batch_op.create_index("ix_task_instances_state_queue_pool", ["state", "queue", "pool"], unique=False)
        batch_op.drop_index("ix_task_instances_in_flight")
        batch_op.drop_index("ix_task_instances_ready")
