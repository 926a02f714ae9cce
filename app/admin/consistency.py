"""Rows of a snapshot that contradict each other.

Each row may pass the API's rules on its own and the set still be one no running system could
have written: an attempt record above its task instance's epoch (every later claim of that task
would collide with it), a row naming a task instance, run or execution the snapshot does not
hold, a run's task naming another run. Every such row is named, so a restore can refuse the
whole document in one answer.
"""

import uuid
from collections import defaultdict
from typing import Any

from app.db.types import metadata

Row = dict[str, Any]  # as the export writes it


def _defaults(name: str) -> Row:
    """What a restore stores for a column a row of table `name` leaves out."""
    return {c.name: c.default.arg if c.default is not None and c.default.is_scalar else None
            for c in metadata.tables[name].c}


def _key(value: Any) -> Any:
    """An identifier as the database will hold it (a UUID in any spelling); anything else as
    text, to compare equal only to itself (the load names what is no identifier)."""
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            return value
    return None if value is None else repr(value)


class _Table:
    """One table's rows, by the position the detail names them at and by primary key."""

    def __init__(self, tables: dict[str, Any], name: str, key: str) -> None:
        rows = tables.get(name)
        self.name = name
        defaults = _defaults(name)
        self.rows = [(n, {**defaults, **row}) for n, row in enumerate(rows if isinstance(rows, list) else [])
                     if isinstance(row, dict)]
        self.by_key = {_key(row[key]): (n, row) for n, row in self.rows}

    def where(self, n: int) -> str:
        return f"{self.name}[{n}]"

    def __iter__(self) -> Any:
        return iter(self.rows)


def _above(value: Any, limit: Any) -> bool:
    return isinstance(value, int) and isinstance(limit, int) and value > limit


def contradictions(tables: dict[str, Any]) -> list[str]:
    """Where the rows of `tables` (a snapshot's) contradict each other, one line per row."""
    runs = _Table(tables, "dag_runs", "id")
    tis = _Table(tables, "task_instances", "id")
    executions = _Table(tables, "executions", "execution_id")
    found: list[str] = []

    def execution_of(table: _Table, n: int, row: Row, column: str) -> None:
        if row[column] is not None and _key(row[column]) not in executions.by_key:
            found.append(f"{table.where(n)}.{column}: execution {row[column]} is not in the snapshot")

    tasks_of_run: dict[Any, set[Any]] = defaultdict(set)
    for _, ti in tis:
        tasks_of_run[_key(ti["dag_run_id"])].add(ti["task_id"])
    for n, ti in tis:
        execution_of(tis, n, ti, "execution_id")
        if (run := runs.by_key.get(_key(ti["dag_run_id"]))) is None:
            found.append(f"{tis.where(n)}.dag_run_id: dag run {ti['dag_run_id']} is not in the snapshot")
            continue
        m, run_row = run
        for column in ("dag_id", "run_id", "tenant_id"):
            if ti[column] != run_row[column]:
                found.append(f"{tis.where(n)}.{column}: {ti[column]!r}, but its dag run "
                             f"({runs.where(m)}) has {run_row[column]!r}")
        upstream = ti["upstream_task_ids"] if isinstance(ti["upstream_task_ids"], list) else []
        if missing := sorted({str(u) for u in upstream} - {str(t) for t in tasks_of_run[_key(ti["dag_run_id"])]}):
            found.append(f"{tis.where(n)}.upstream_task_ids: {missing} are not tasks of its run")

    found += _attempts_and_history(tables, tis, execution_of)
    found += _executions_and_seats(tables, executions)
    removals = _Table(tables, "log_removals", "dag_run_id")
    found += [f"{removals.where(n)}.dag_run_id: dag run {row['dag_run_id']} is not in the snapshot"
              for n, row in removals if _key(row["dag_run_id"]) not in runs.by_key]
    return found


def _attempts_and_history(tables: dict[str, Any], tis: _Table, execution_of: Any) -> list[str]:
    """Attempt records and archived tries against their task instance: never above its try or
    epoch (the task instance's counters never go backwards), and one attempt per claimed epoch."""
    found: list[str] = []
    for name in ("task_attempts", "task_instance_history"):
        table = _Table(tables, name, "id")
        epochs: dict[tuple[Any, Any], int] = {}
        for n, row in table:
            execution_of(table, n, row, "execution_id")
            if (owner := tis.by_key.get(_key(row["task_instance_id"]))) is None:
                found.append(f"{table.where(n)}.task_instance_id: task instance {row['task_instance_id']} "
                             "is not in the snapshot")
                continue
            m, ti = owner
            for column in ("try_number", "attempt_epoch"):
                if _above(row[column], ti[column]):
                    found.append(f"{table.where(n)}.{column}: {row[column]} is above its task instance's "
                                 f"({tis.where(m)}, {column} {ti[column]})")
            epoch = row["attempt_epoch"]
            if name == "task_attempts" and isinstance(epoch, int) and epoch > 0:  # epoch 0: before the fence
                if (first := epochs.setdefault((_key(row["task_instance_id"]), epoch), n)) != n:
                    found.append(f"{table.where(n)}.attempt_epoch: epoch {epoch} of its task instance is "
                                 f"recorded twice (also {table.where(first)})")
    return found


def _executions_and_seats(tables: dict[str, Any], executions: _Table) -> list[str]:
    """Each execution's predecessor and successor among the same seat's executions (its
    predecessor of a lower generation), and each seat's current execution one of its own."""
    found: list[str] = []
    for n, row in executions:
        for column in ("previous_execution_id", "superseded_by"):
            if row[column] is None:
                continue
            if (other := executions.by_key.get(_key(row[column]))) is None:
                found.append(f"{executions.where(n)}.{column}: execution {row[column]} is not in the snapshot")
            elif other[1]["seat"] != row["seat"]:
                found.append(f"{executions.where(n)}.{column}: execution {row[column]} is of another seat "
                             f"({executions.where(other[0])})")
            elif column == "previous_execution_id" and not _above(row["generation"], other[1]["generation"]):
                found.append(f"{executions.where(n)}.generation: not above its predecessor's "
                             f"({executions.where(other[0])})")
    seats = _Table(tables, "seats", "name")
    for n, row in seats:
        current = row["current_execution_id"]
        if current is None:
            continue
        if (execution := executions.by_key.get(_key(current))) is None:
            found.append(f"{seats.where(n)}.current_execution_id: execution {current} is not in the snapshot")
        elif execution[1]["seat"] != row["name"]:
            found.append(f"{seats.where(n)}.current_execution_id: execution {current} is of another seat "
                         f"({executions.where(execution[0])})")
    return found
