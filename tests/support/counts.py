"""The kept counts of task instances (app/orchestration/counts.py) against a count of the rows
(tests/orchestration)."""

from sqlalchemy import func, select, text
from sqlmodel import Session

from app.orchestration.counts import fold_counts
from app.orchestration.models import TaskInstanceCount, TaskInstanceCountDelta

# Their tables: emptied after the others between tests (deleting task instances appends deltas).
KEPT_COUNTS = (TaskInstanceCount.__tablename__, TaskInstanceCountDelta.__tablename__)

Key = tuple[str, str, bool]


def counted(engine) -> dict[Key, int]:
    """What a count of the task instances says, by (dag_id, state, mapped)."""
    with Session(engine) as session:
        rows = session.execute(text("SELECT dag_id, state, map_index >= 0, count(*) FROM task_instances "
                                    "GROUP BY dag_id, state, map_index >= 0"))
        return {(dag, state, bool(mapped)): n for dag, state, mapped, n in rows}


def kept(engine, *, with_deltas: bool = True) -> dict[Key, int]:
    """What the counts say (with the pending deltas), zeros left out."""
    found: dict[Key, int] = {}
    with Session(engine) as session:
        parts = [select(TaskInstanceCount.dag_id, TaskInstanceCount.state, TaskInstanceCount.mapped,
                        TaskInstanceCount.n)]
        if with_deltas:
            parts.append(select(TaskInstanceCountDelta.dag_id, TaskInstanceCountDelta.state,
                                TaskInstanceCountDelta.mapped, TaskInstanceCountDelta.delta))
        for part in parts:
            for dag, state, mapped, n in session.execute(part):
                found[(dag, state, bool(mapped))] = found.get((dag, state, bool(mapped)), 0) + n
    return {key: n for key, n in found.items() if n}


def deltas(engine) -> int:
    with Session(engine) as session:
        return session.execute(select(func.count()).select_from(TaskInstanceCountDelta)).scalar_one()


def fold(engine) -> None:
    with Session(engine) as session:
        fold_counts(session=session)
        session.commit()


def assert_exact(engine) -> None:
    """Exact before a fold (counts + deltas) and after it (the counts alone, no delta left)."""
    assert kept(engine) == counted(engine)
    fold(engine)
    assert deltas(engine) == 0
    assert kept(engine, with_deltas=False) == counted(engine)
