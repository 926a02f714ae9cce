"""What the dashboard's pages show, assembled from the domain services' own reads.

Nothing here queries the database itself: each view calls the service functions the JSON API
calls, and only arranges their answers for a page.
"""

import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session

from app.errors import AppError
from app.execution import history
from app.execution.models import TaskAttempt
from app.identity import service as identity
from app.identity.schemas import ExecutionPublic, execution_public
from app.logs import service as logs
from app.logs.stores.base import LogStore
from app.orchestration import runs, states
from app.orchestration.models import DagRun, TaskInstance
from app.routing import service as routing
from app.ui import charts, graph, tail, timeline

RUNS_PER_PAGE = 50
RUNS_COUNTED = 10_000  # past the page's start: the pager says "10,000+" rather than count every run
LOG_TAIL_BYTES = tail.READ_BYTES
FLEET_WINDOW = timedelta(hours=1)


@dataclass
class RunRow:
    run: DagRun
    states: Counter[str]


def run_rows(*, session: Session, offset: int, **filters: Any) -> tuple[list[RunRow], int]:
    """One page of runs (runs.list_runs' `filters`), each with its task instances' states counted,
    and how many runs there are, counted up to RUNS_COUNTED past the page's start."""
    found, total = runs.list_runs(session=session, limit=RUNS_PER_PAGE, offset=offset, count_up_to=RUNS_COUNTED,
                                  **filters)
    states = runs.states_by_run(session=session, dag_run_ids=[r.id for r in found])
    rows = [RunRow(r, Counter(states[r.id])) for r in found]
    return rows, total


def run_page(*, session: Session, dag_id: str, run_id: str) -> tuple[DagRun, list[TaskInstance]]:
    run = runs.get_run(session=session, dag_id=dag_id, run_id=run_id)
    return run, runs.run_task_instances(session=session, dag_run_id=run.id)


@dataclass
class Epoch:
    attempt: TaskAttempt
    execution: ExecutionPublic | None
    current: bool  # the task instance's live attempt

    @property
    def ended_why(self) -> str:
        return timeline.describe(self.attempt, self.current)


@dataclass
class TryEpochs:
    number: int
    epochs: list[Epoch] = field(default_factory=list)

    @property
    def infra_faults(self) -> int:
        return sum(1 for e in self.epochs if e.attempt.outcome_kind == "infra")


def task_instance_page(*, session: Session, ti_id: uuid.UUID) -> tuple[TaskInstance, list[TryEpochs]]:
    """The task instance and every try it has had, each with its epochs in order."""
    ti = runs.get_task_instance(session=session, ti_id=ti_id)
    found = history.tries(session, ti)
    executions = {i: execution_public(e) for i, e in
                  history.runners(session, [a for t in found for a in t.epochs]).items()}
    tries = {n: TryEpochs(n) for n in range(1, ti.try_number + 1)}
    for t in found:
        live = t.current and ti.state in states.IN_FLIGHT
        tries.setdefault(t.number, TryEpochs(t.number)).epochs.extend(
            Epoch(a, executions.get(a.execution_id) if a.execution_id else None,
                  current=live and a.attempt_epoch == ti.attempt_epoch)
            for a in t.epochs)
    return ti, [tries[n] for n in sorted(tries)]


@dataclass
class LogView:
    ti: TaskInstance
    try_number: int
    log: logs.TryLog
    tail: tail.Tail  # the last LOG_TAIL_BYTES, from a line start

    @property
    def headers(self) -> list[str]:
        return [seg.header.decode(errors="replace").rstrip("\n") for seg in self.log.segments]


def log_page(*, session: Session, store: LogStore, ti_id: uuid.UUID, try_number: int) -> LogView:
    """The end of a try's log in whole lines; only that end is read."""
    ti = runs.get_task_instance(session=session, ti_id=ti_id)
    log = logs.try_log(session=session, store=store, ti=ti, try_number=try_number)
    return LogView(ti, try_number, log, tail.read_lines(store, log, None))


def log_tail(*, session: Session, store: LogStore, ti_id: uuid.UUID, try_number: int, offset: int) -> dict[str, Any]:
    """What the live tail appends: the whole lines from byte `offset` on, whether the try's log
    is complete, and the task instance's state (the try's outcome, once it has one)."""
    ti = runs.get_task_instance(session=session, ti_id=ti_id)
    log = logs.try_log(session=session, store=store, ti=ti, try_number=try_number)
    read = tail.read_lines(store, log, offset)
    return {"next": read.next, "finished": read.finished, "more": read.more,
            "state": ti.state if try_number == ti.try_number else None,
            "lines": [{"text": line.text, "kind": line.kind, "epoch": line.epoch} for line in read.lines]}


def run_graph(tis: list[TaskInstance]) -> graph.Graph:
    return graph.layout(tis)


def run_timeline(*, session: Session, run: DagRun, tis: list[TaskInstance], now: datetime) -> timeline.Timeline:
    """Every attempt epoch of the run as a Gantt chart; two queries for the whole run."""
    attempts = history.run_attempts(session, run.id)
    return timeline.build(tis, attempts, history.runners(session, attempts), now)


def outcome_charts(*, session: Session, now: datetime) -> list[charts.Chart]:
    """Attempts per minute by outcome kind over the last hours."""
    start = charts.since(now)
    return charts.per_minute(history.outcomes_per_minute(session, start, tuple(charts.KINDS)), start)


@dataclass
class FleetRow:
    """One seat: its current execution and what its executions hold and did in FLEET_WINDOW.
    (A new column is a field here and a header and a cell in macros.html: fleet_headers, fleet_cells.)"""

    execution: ExecutionPublic
    activity: history.SeatActivity
    heartbeat_age: float | None  # seconds since the latest heartbeat of its in-flight attempts
    routes: list[tuple[str, str, int]] = field(default_factory=list)  # in flight by (queue, pool)

    @property
    def superseded(self) -> int:
        """Its earlier generations: every one was superseded by the next."""
        return self.execution.generation - 1


def fleet_page(*, session: Session, now: datetime) -> list[FleetRow]:
    """Every seat that ever had an execution, by name, with its activity."""
    activity, routes = history.seat_activity(session, now - FLEET_WINDOW), history.seat_routes(session)
    rows = []
    for e in identity.occupants(session=session):
        act = activity.get(e.seat, history.SeatActivity())
        beat = act.last_heartbeat_at
        rows.append(FleetRow(execution_public(e), act, (now - beat).total_seconds() if beat else None,
                             routes.get(e.seat, [])))
    return rows


def pools_page(*, session: Session) -> list[routing.PoolUse]:
    """Every pool with the slots its task instances hold."""
    return routing.pool_uses(session=session)


def seat_page(*, session: Session, seat: str) -> list[ExecutionPublic]:
    """Every execution of `seat`, newest generation first; 404 for a seat never admitted."""
    executions = identity.seat_executions(session=session, seat=seat)
    if not executions:
        raise AppError(404, "seat-not-found", "Seat not found", f"No execution was ever admitted for seat {seat!r}.")
    return [execution_public(e) for e in reversed(executions)]
