"""The kept counts of task instances per (DAG, state, mapped): exact counts that cost the same
however many task instances the history holds (contract 8; docs/decisions/0015-kept-counts.md).

Migration 0015's triggers append a delta for every change of a task instance's DAG, state or
mappedness, whoever writes it; `fold_counts` moves the deltas into the counts (the reaper's
sweep, on one replica at a time). A count is the kept count plus the deltas not yet folded,
read in one statement: one snapshot, exact even while a fold commits.
"""

from collections.abc import Sequence

from sqlalchemy import Connection, Select, func, literal_column, select, text, union_all
from sqlmodel import Session

from app.db.dialect import dialect_of
from app.orchestration.models import TaskInstanceCount, TaskInstanceCountDelta

COUNTS, DELTAS = TaskInstanceCount.__table__, TaskInstanceCountDelta.__table__

# One statement on PostgreSQL: the deltas a fold deletes are exactly those it adds (a delta
# committed meanwhile is not in its snapshot and stays). Grouped rows in key order, so two folds
# lock counters in the same order.
_FOLD_IN_ONE = text(
    "WITH gone AS (DELETE FROM task_instance_count_deltas RETURNING dag_id, state, mapped, delta) "
    "INSERT INTO task_instance_counts (dag_id, state, mapped, n) "
    "SELECT dag_id, state, mapped, sum(delta) FROM gone GROUP BY dag_id, state, mapped "
    "ORDER BY dag_id, state, mapped "
    "ON CONFLICT (dag_id, state, mapped) DO UPDATE SET n = task_instance_counts.n + excluded.n")
# SQLite's writers take turns, so the deltas up to the highest id read are the ones added.
_LAST_DELTA = text("SELECT max(id) FROM task_instance_count_deltas")
_FOLD_UP_TO = text(
    "INSERT INTO task_instance_counts (dag_id, state, mapped, n) "
    "SELECT dag_id, state, mapped, sum(delta) FROM task_instance_count_deltas WHERE id <= :last "
    "GROUP BY dag_id, state, mapped "
    "ON CONFLICT (dag_id, state, mapped) DO UPDATE SET n = task_instance_counts.n + excluded.n")
_FOLDED_UP_TO = text("DELETE FROM task_instance_count_deltas WHERE id <= :last")
_DROP_ZEROS = text("DELETE FROM task_instance_counts WHERE n = 0")


def fold_counts(*, session: Session) -> None:
    """Move the deltas into the counts, dropping the counts that reach zero. Never commits."""
    if dialect_of(session).writes_in_ctes:
        session.execute(_FOLD_IN_ONE)
    else:
        last = session.execute(_LAST_DELTA).scalar()
        if last is None:
            return
        session.execute(_FOLD_UP_TO, {"last": last})
        session.execute(_FOLDED_UP_TO, {"last": last})
    session.execute(_DROP_ZEROS)


def _kept_and_pending(states: Sequence[str] | None, dag_id: str | None, *, mapped: bool | None = None) -> Select:
    """The counts and the pending deltas matching the arguments, as (dag_id, state, n) rows."""
    parts = []
    for table, value in ((COUNTS, COUNTS.c.n), (DELTAS, DELTAS.c.delta)):
        part = select(table.c.dag_id, table.c.state, value.label("n"))
        if states is not None:
            part = part.where(table.c.state.in_(states))
        if dag_id is not None:
            part = part.where(table.c.dag_id == dag_id)
        if mapped is not None:
            part = part.where(table.c.mapped == mapped)
        parts.append(part)
    return union_all(*parts).subquery()


def count_task_instances(*, session: Session, states: Sequence[str] | None = None, dag_id: str | None = None) -> int:
    """How many task instances are in one of `states` (None: any), of `dag_id` (None: any DAG);
    exact, in one statement."""
    rows = _kept_and_pending(states, dag_id)
    return int(session.execute(select(func.coalesce(func.sum(rows.c.n), 0))).scalar_one())


def unmapped_per_dag(*, session: Session, states: Sequence[str] | None = None) -> list[tuple[str, int]]:
    """The count of each DAG's unmapped task instances in one of `states` (None: any), the DAGs
    with none left out, in dag_id order as the database orders them (its collation, the one
    a list's ORDER BY dag_id uses)."""
    rows = _kept_and_pending(states, None, mapped=False)
    total = func.sum(rows.c.n)
    query = (select(rows.c.dag_id, total).group_by(rows.c.dag_id).having(total > literal_column("0"))
             .order_by(rows.c.dag_id))
    return [(dag_id, int(n)) for dag_id, n in session.execute(query)]


def count_by_state(*, conn: Connection | Session) -> dict[str, int]:
    """How many task instances are in each state (the states with none may be left out); exact,
    in one statement."""
    rows = _kept_and_pending(None, None)
    return {state: int(n) for state, n in conn.execute(select(rows.c.state, func.sum(rows.c.n)).group_by(rows.c.state))}
