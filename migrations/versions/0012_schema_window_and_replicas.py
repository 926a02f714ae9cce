"""the schema window and the replica registry (expand only)

`schema_window` holds one row, rewritten by every migration run in its transaction: the
revision the schema is at and the oldest migrations' head that may serve it, which a release
that does not know the revision reads (contract 10.1). `replicas` lists the server processes
serving the database, each with its version, its migrations' head and a heartbeat (10.2).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None
# Only adds: tables.
expand_only = True


def upgrade() -> None:
    op.create_table(
        "schema_window",
        sa.Column("revision", sa.String(64), nullable=False),
        sa.Column("servable_from", sa.String(64), nullable=False),
        sa.Column("written_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("revision", name=op.f("pk_schema_window")),
    )
    op.create_table(
        "replicas",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("head", sa.String(64), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("liveness_seconds", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_replicas")),
    )


def downgrade() -> None:
    op.drop_table("replicas")
    op.drop_table("schema_window")
