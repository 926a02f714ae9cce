"""identity: seats, executions, installation secrets

Revision ID: 0001
Revises:
Create Date: 2026-11-30 08:52:54.132998
"""

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None
# Only adds: the first tables.
expand_only = True


def upgrade() -> None:
    op.create_table('executions',
    sa.Column('execution_id', sa.Uuid(), nullable=False),
    sa.Column('seat', sa.String(128), nullable=False),
    sa.Column('swarm', sa.String(128), nullable=False),
    sa.Column('role', sa.String(128), nullable=True),
    sa.Column('labels', sa.JSON(), nullable=False),
    sa.Column('generation', sa.Integer(), nullable=False),
    sa.Column('previous_execution_id', sa.Uuid(), nullable=True),
    sa.Column('superseded_by', sa.Uuid(), nullable=True),
    sa.Column('runtime_backend', sa.String(16), nullable=False),
    sa.Column('pod_namespace', sa.String(253), nullable=True),
    sa.Column('pod_name', sa.String(253), nullable=True),
    sa.Column('pod_uid', sa.String(128), nullable=True),
    sa.Column('server_id', sa.String(253), nullable=True),
    sa.Column('process_namespace', sa.String(253), nullable=True),
    sa.Column('pid', sa.Integer(), nullable=True),
    sa.Column('has_target', sa.Boolean(), nullable=False),
    sa.Column('obs_phase', sa.String(64), nullable=True),
    sa.Column('obs_reason', sa.String(256), nullable=True),
    sa.Column('obs_exit_code', sa.Integer(), nullable=True),
    sa.Column('obs_terminal', sa.Boolean(), nullable=True),
    sa.Column('obs_observed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('idempotency_key', sa.String(256), nullable=True),
    sa.Column('request_fingerprint', sa.String(64), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('execution_id', name=op.f('pk_executions')),
    sa.UniqueConstraint('pod_uid', name=op.f('uq_executions_pod_uid')),
    sa.UniqueConstraint('seat', 'generation', name=op.f('uq_executions_seat_generation')),
    sa.UniqueConstraint('seat', 'idempotency_key', name=op.f('uq_executions_seat_idempotency_key'))
    )
    with op.batch_alter_table('executions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_executions_seat'), ['seat'], unique=False)

    op.create_table('installation_secrets',
    sa.Column('name', sa.String(64), nullable=False),
    sa.Column('value', sa.String(), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_installation_secrets'))
    )
    op.create_table('seats',
    sa.Column('name', sa.String(128), nullable=False),
    sa.Column('swarm', sa.String(128), nullable=False),
    sa.Column('role', sa.String(128), nullable=True),
    sa.Column('labels', sa.JSON(), nullable=False),
    sa.Column('current_execution_id', sa.Uuid(), nullable=True),
    sa.Column('resume_token', sa.String(), nullable=True),
    sa.Column('last_message_id', sa.String(256), nullable=True),
    sa.Column('context_window', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_seats'))
    )


def downgrade() -> None:
    op.drop_table('seats')
    op.drop_table('installation_secrets')
    with op.batch_alter_table('executions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_executions_seat'))

    op.drop_table('executions')
