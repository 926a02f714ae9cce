"""kept counts of task instances per (DAG, state, mapped), so the Airflow list's exact
total_entries and deep offsets do not grow with the history kept

Contract 8 (issue 45): an exact count of a state's task instances was an index-only count of
every match. Two tables keep it instead: task_instance_counts (one row per DAG, state and
whether the row is mapped) and task_instance_count_deltas, which triggers on task_instances
append to. Writers only INSERT deltas, so no claim waits on a counter row another claim
updated; one process (the reaper's sweep, app/orchestration/counts.fold_counts) folds the
deltas into the counts. Triggers, not the application's statements, so every writer keeps the
counts exact, older releases and `db clean` included (docs/decisions/0015-kept-counts.md).

PostgreSQL: INSERT and DELETE are statement triggers over their transition tables (one delta
per group per statement: run creation and `db clean` stay cheap); UPDATE is a row trigger whose
WHEN clause lets every update that moves no count (a heartbeat) pass without a function call.
SQLite: row triggers. A later migration that rebuilds task_instances on SQLite (batch mode
copies the table) must create the triggers again.

Expand only: new tables and triggers; an older release's statements fire the triggers and know
nothing else of them.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None
# Adds tables and triggers that append to one of them.
expand_only = True

COUNTS, DELTAS = "task_instance_counts", "task_instance_count_deltas"
FUNCTION = "task_instance_count_deltas_append"
TRIGGERS = ("task_instance_counts_insert", "task_instance_counts_update", "task_instance_counts_delete")
# An update moves a count only when it changes a counted key.
MOVES_A_COUNT = ("OLD.state IS DISTINCT FROM NEW.state OR OLD.dag_id IS DISTINCT FROM NEW.dag_id"
                 " OR (OLD.map_index >= 0) IS DISTINCT FROM (NEW.map_index >= 0)")
SEED = (f"INSERT INTO {COUNTS} (dag_id, state, mapped, n) SELECT dag_id, state, map_index >= 0, count(*) "
        "FROM task_instances GROUP BY dag_id, state, map_index >= 0")
APPEND = f"INSERT INTO {DELTAS} (dag_id, state, mapped, delta)"

PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_LEVEL = 'ROW' THEN
        {APPEND} VALUES (OLD.dag_id, OLD.state, OLD.map_index >= 0, -1),
                        (NEW.dag_id, NEW.state, NEW.map_index >= 0, 1);
    ELSIF TG_OP = 'INSERT' THEN
        {APPEND} SELECT dag_id, state, map_index >= 0, count(*) FROM new_rows GROUP BY 1, 2, 3;
    ELSE
        {APPEND} SELECT dag_id, state, map_index >= 0, -count(*) FROM old_rows GROUP BY 1, 2, 3;
    END IF;
    RETURN NULL;
END $$
"""
PG_TRIGGERS = (
    f"CREATE TRIGGER {TRIGGERS[0]} AFTER INSERT ON task_instances REFERENCING NEW TABLE AS new_rows "
    f"FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()",
    f"CREATE TRIGGER {TRIGGERS[1]} AFTER UPDATE ON task_instances FOR EACH ROW WHEN ({MOVES_A_COUNT}) "
    f"EXECUTE FUNCTION {FUNCTION}()",
    f"CREATE TRIGGER {TRIGGERS[2]} AFTER DELETE ON task_instances REFERENCING OLD TABLE AS old_rows "
    f"FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()",
)
SQLITE_TRIGGERS = (
    f"CREATE TRIGGER {TRIGGERS[0]} AFTER INSERT ON task_instances BEGIN "
    f"{APPEND} VALUES (NEW.dag_id, NEW.state, NEW.map_index >= 0, 1); END",
    f"CREATE TRIGGER {TRIGGERS[1]} AFTER UPDATE ON task_instances WHEN {MOVES_A_COUNT.replace('DISTINCT FROM', 'NOT')} "
    f"BEGIN {APPEND} VALUES (OLD.dag_id, OLD.state, OLD.map_index >= 0, -1), "
    "(NEW.dag_id, NEW.state, NEW.map_index >= 0, 1); END",
    f"CREATE TRIGGER {TRIGGERS[2]} AFTER DELETE ON task_instances BEGIN "
    f"{APPEND} VALUES (OLD.dag_id, OLD.state, OLD.map_index >= 0, -1); END",
)


def _create_tables() -> None:
    op.create_table(
        COUNTS,
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("mapped", sa.Boolean(), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("dag_id", "state", "mapped", name=op.f(f"pk_{COUNTS}")),
    )
    op.create_table(
        DELTAS,
        # SQLite numbers only an INTEGER PRIMARY KEY by itself.
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("dag_id", sa.String(250), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("mapped", sa.Boolean(), nullable=False),
        sa.Column("delta", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{DELTAS}")),
    )


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        _create_tables()
        for trigger in SQLITE_TRIGGERS:
            op.execute(trigger)
        op.execute(SEED)  # in the chain's transaction, which holds the database's one write lock
        return
    with op.get_context().autocommit_block():
        # The tables, function and triggers in one transaction (a rerun after a cut starts over).
        op.execute("BEGIN")
        op.execute("SET LOCAL lock_timeout = '5s'")  # CREATE TRIGGER waits for writers: never queue them long
        op.execute(f"DROP TABLE IF EXISTS {COUNTS}, {DELTAS}")
        _create_tables()
        op.execute(PG_FUNCTION)
        for name, trigger in zip(TRIGGERS, PG_TRIGGERS, strict=True):
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON task_instances")
            op.execute(trigger)
        op.execute("COMMIT")
        # Seeded without a lock on task_instances: from the commit above, every change appends a
        # delta. Under one snapshot, the count sees exactly the changes committed before it, and
        # the DELETE removes exactly the deltas of those changes (the ones committed since the
        # triggers were created); the deltas of changes committed later stay, to be folded.
        op.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        op.execute(SEED)
        op.execute(f"DELETE FROM {DELTAS}")
        op.execute("COMMIT")


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name}" + (" ON task_instances" if postgres else ""))
    if postgres:
        op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
    op.drop_table(DELTAS)
    op.drop_table(COUNTS)
