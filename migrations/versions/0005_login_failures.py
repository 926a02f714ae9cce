"""login throttling: failed password checks, counted in the database (expand only)

A new table and nothing else, so replicas still running the previous revision keep working
during a rolling upgrade (they simply do not throttle).

Revision ID: 0005
Revises: 0003
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0003"
branch_labels = None
depends_on = None
# Only adds: a table.
expand_only = True


def upgrade() -> None:
    op.create_table(
        "login_failures",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("subject", sa.String(64), nullable=False),
        sa.Column("failed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_login_failures")),
    )
    with op.batch_alter_table("login_failures", schema=None) as batch_op:
        batch_op.create_index("ix_login_failures_subject_failed_at", ["subject", "failed_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_login_failures_failed_at"), ["failed_at"], unique=False)


def downgrade() -> None:
    op.drop_table("login_failures")
