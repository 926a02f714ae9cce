"""What the dashboard's pages show, assembled from the domain services' own reads.

Nothing here queries the database itself: each view calls the service functions the JSON API
calls, and only arranges their answers for a page.
"""

import uuid
from collections import Counter
from dataclasses import dataclass, field

from sqlmodel import Session

from app.errors import AppError
from app.execution import history
from app.execution.models import TaskAttempt
from app.identity import service as identity
from app.identity.schemas import ExecutionPublic, execution_public
from app.logs import service as logs
from app.logs.store import LogStore
from app.orchestration import runs
from app.orchestration import states as s
from app.orchestration.models import DagRun, TaskInstance
from app.orchestration.states import AttemptState

RUNS_PER_PAGE = 50
LOG_TAIL_BYTES = 64 * 1024

OUTCOME_TEXT = {
    "success": "succeeded",
    "app": "application failure (spends the try)",
    "infra": "infrastructure fault (re-placed, same try)",
    "rescheduled": "rescheduled (sensor deferral, same try)",
}


@dataclass
class RunRow:
    run: DagRun
    states: Counter[str]


def run_rows(*, session: Session, offset: int, dag_id: str | None) -> tuple[list[RunRow], int]:
    found, total = runs.list_runs(session=session, limit=RUNS_PER_PAGE, offset=offset, dag_id=dag_id)
    rows = [RunRow(r, Counter(ti.state for ti in runs.run_task_instances(session=session, dag_run_id=r.id)))
            for r in found]
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
        a = self.attempt
        if a.outcome_kind is not None:
            text = OUTCOME_TEXT.get(a.outcome_kind, a.outcome_kind)
            return f"{text}: {a.reason}" if a.reason else text
        if a.state == AttemptState.RELEASED:
            return "handed back before user code started (no budget spent)"
        if self.current:
            return "in flight"
        return "superseded without an outcome (cleared, marked or requeued)"


@dataclass
class Try:
    number: int
    epochs: list[Epoch] = field(default_factory=list)

    @property
    def infra_faults(self) -> int:
        return sum(1 for e in self.epochs if e.attempt.outcome_kind == "infra")


def task_instance_page(*, session: Session, ti_id: uuid.UUID) -> tuple[TaskInstance, list[Try]]:
    """The task instance and every try it has had, each with its epochs in order."""
    ti = runs.get_task_instance(session=session, ti_id=ti_id)
    found = history.tries(session, ti)
    executions = {i: execution_public(e) for i, e in
                  history.runners(session, [a for t in found for a in t.epochs]).items()}
    tries = {n: Try(n) for n in range(1, ti.try_number + 1)}
    for t in found:
        live = t.current and ti.state in s.IN_FLIGHT
        tries.setdefault(t.number, Try(t.number)).epochs.extend(
            Epoch(a, executions.get(a.execution_id) if a.execution_id else None,
                  current=live and a.attempt_epoch == ti.attempt_epoch)
            for a in t.epochs)
    return ti, [tries[n] for n in sorted(tries)]


@dataclass
class LogView:
    ti: TaskInstance
    try_number: int
    log: logs.TryLog
    start: int  # the first byte shown
    lines: list[str]

    @property
    def headers(self) -> list[str]:
        return [seg.header.decode(errors="replace").rstrip("\n") for seg in self.log.segments]


def log_page(*, session: Session, store: LogStore, ti_id: uuid.UUID, try_number: int) -> LogView:
    """The last LOG_TAIL_BYTES of a try's log, cut at a line start; only that tail is read."""
    ti = runs.get_task_instance(session=session, ti_id=ti_id)
    log = logs.try_log(session=session, store=store, ti_id=ti_id, try_number=try_number)
    start = max(0, log.size - LOG_TAIL_BYTES)
    data = b"".join(logs.read(store, log, start))
    if start and (newline := data.find(b"\n")) >= 0:  # drop the partial first line
        start, data = start + newline + 1, data[newline + 1:]
    return LogView(ti, try_number, log, start, data.decode(errors="replace").splitlines())


def is_system_line(line: str) -> bool:
    return line.startswith(logs.SYSTEM_PREFIX)


def seat_page(*, session: Session, seat: str) -> list[ExecutionPublic]:
    """Every execution of `seat`, newest generation first; 404 for a seat never admitted."""
    executions = identity.seat_executions(session=session, seat=seat)
    if not executions:
        raise AppError(404, "seat-not-found", "Seat not found", f"No execution was ever admitted for seat {seat!r}.")
    return [execution_public(e) for e in reversed(executions)]


def occupants_page(*, session: Session) -> list[ExecutionPublic]:
    return [execution_public(e) for e in identity.occupants(session=session)]
