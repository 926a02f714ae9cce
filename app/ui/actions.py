"""The dashboard's actions: every operator rail as a form (contract 12).

Each action has a confirmation page saying what it will change — which task instances move and
to what, which attempts in flight are fenced off — whose form POSTs back to the same URL; the
POST takes the rail through the same services as the API and shows what changed. A refusal
(409: the task instance moved meanwhile, or has nothing in flight) is shown on the
confirmation page.
"""

import uuid
from dataclasses import dataclass
from typing import Literal

from sqlmodel import Session

from app.errors import AppError
from app.execution import operator
from app.orchestration import runs, states
from app.orchestration.models import DagRun, TaskInstance

RunAction = Literal["cancel", "clear-failed"]
TaskAction = Literal["clear", "mark-success", "mark-failed", "replace"]
TITLES = {"cancel": "Cancel the run", "clear-failed": "Clear the run's failed tasks", "clear": "Clear",
          "mark-success": "Mark success", "mark-failed": "Mark failed", "replace": "Re-place now"}


@dataclass
class Change:
    """What an action does to one task instance: what it becomes, and the attempt it fences off."""

    ti: TaskInstance
    becomes: str
    fenced: str | None


def _fenced(ti: TaskInstance) -> str | None:
    if ti.state not in states.IN_FLIGHT:
        return None
    on = f" on execution {str(ti.execution_id)[:8]}" if ti.execution_id else ""
    return f"try {ti.try_number}, epoch {ti.attempt_epoch}{on} (told to terminate)"


def _next_try(ti: TaskInstance) -> str:
    number = ti.try_number if ti.state == states.UPSTREAM_FAILED else ti.try_number + 1
    return f"a new try ({number}), waiting or scheduled"


def run_changes(action: RunAction, tis: list[TaskInstance]) -> list[Change]:
    if action == "cancel":
        return [Change(ti, states.FAILED if ti.state in states.IN_FLIGHT else states.SKIPPED, _fenced(ti))
                for ti in tis if ti.state not in states.FINISHED]
    return [Change(ti, _next_try(ti), None) for ti in tis if ti.state in states.CLEAR_FAILED.sources]


def ti_changes(action: TaskAction, ti: TaskInstance) -> list[Change]:
    if action == "clear":
        return [Change(ti, _next_try(ti), _fenced(ti))] if ti.state in states.CLEAR.sources else []
    if action in ("mark-success", "mark-failed"):
        verdict = states.SUCCESS if action == "mark-success" else states.FAILED
        return [Change(ti, verdict, _fenced(ti))] if ti.state != verdict else []
    if ti.state not in states.IN_FLIGHT:
        return []
    if ti.infra_attempts >= ti.max_infra_attempts or (not ti.idempotent and ti.user_code_started):
        return [Change(ti, f"{states.INFRA_FAILED} (no re-place left for this try)", _fenced(ti))]
    return [Change(ti, f"scheduled again at once on try {ti.try_number} (infra budget "
                       f"{ti.infra_attempts + 1} of {ti.max_infra_attempts})", _fenced(ti))]


def apply_run(*, session: Session, action: RunAction, run: DagRun) -> None:
    """Take the run's rail (its refusals raised as the API raises them)."""
    if action == "cancel":
        operator.cancel(session=session, run=run)
    else:
        operator.clear_failed(session=session, dag_run_id=run.id)


def apply_ti(*, session: Session, action: TaskAction, ti_id: uuid.UUID) -> None:
    """Take the task instance's rail (its refusals raised as the API raises them)."""
    ti = runs.get_task_instance(session=session, ti_id=ti_id)
    if action == "replace":
        operator.replace(session=session, ti=ti)
        return
    if action == "clear":
        operator.require_moved(operator.clear(session=session, ti=ti))
    else:
        operator.require_moved(operator.mark_state(session=session, ti=ti,
                                             state=states.SUCCESS if action == "mark-success" else states.FAILED))


def refusal(exc: AppError) -> str:
    return f"Refused ({exc.status} {exc.type}): {exc.detail}"
