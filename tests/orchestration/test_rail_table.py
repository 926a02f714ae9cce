"""The rail table (app/orchestration/states.py) is what the rails obey: each rail, driven through
the service that takes it, moves a task instance from every one of its source states to its
target, and refuses every other state, leaving the row as it was."""

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlmodel import Session

from app.auth.attempt_key import AttemptKey
from app.db.types import utcnow
from app.errors import AppError
from app.execution import dispatch, fence, operator, reapers
from app.execution.schemas import Report
from app.orchestration import states
from app.orchestration.models import TaskInstance
from app.orchestration.operator import cancel, clear, mark_state, skip
from app.orchestration.outcomes import InfraBackoff, Outcome, apply_outcome, requeue
from app.orchestration.promotion import promote
from app.orchestration.readiness import refresh_run
from tests.support.api import Worker, task, ti_ids

NO_BACKOFF = InfraBackoff(0, 0)


@dataclass
class Case:
    """A task instance forced into a state, and what else the rail needs to act on it."""

    ti_id: uuid.UUID
    dag_run_id: uuid.UUID
    execution_id: uuid.UUID


def outcome(kind: str, reason: str | None = None, **at: Any) -> Callable[[Session, TaskInstance, Case], Any]:
    return lambda session, ti, case: apply_outcome(session=session, ti=ti, outcome=Outcome(kind, reason, **at),
                                                   backoff=NO_BACKOFF)


def reaper_mark(reason: str) -> Callable[[Session, TaskInstance, Case], Any]:
    def mark(session: Session, ti: TaskInstance, case: Case) -> Any:
        candidate = reapers.Candidate(AttemptKey.of(ti), ti.state, reason)
        return reapers.mark_lost(session=session, candidate=candidate, backoff=NO_BACKOFF, now=utcnow())
    return mark


def promotion(rail: states.Rail) -> Callable[[Session, TaskInstance, Case], Any]:
    return lambda session, ti, case: promote(session=session, rail=rail, now=utcnow(), skip_locked=False)


def refresh(reopen: bool = False) -> Callable[[Session, TaskInstance, Case], Any]:
    return lambda session, ti, case: refresh_run(session, case.dag_run_id, utcnow(), reopen=reopen)


# rail -> (the task it acts on: "a" stands alone, "t" waits on "up"; the state "up" is put in;
#          column values the rail's branch needs; how the rail is taken; the state a source moves to)
SPECS: dict[str, tuple[str, str, dict[str, Any], Callable[[Session, TaskInstance, Case], Any], states.State]] = {
    "claim": ("a", states.RUNNING, {}, lambda session, ti, case: dispatch.claim(
        session=session, execution_id=case.execution_id, limit=10), states.QUEUED),
    "start": ("a", states.RUNNING, {}, lambda session, ti, case: fence.report(
        session=session, key=AttemptKey.of(ti), body=Report(state="running"), backoff=NO_BACKOFF), states.RUNNING),
    "requeue": ("a", states.RUNNING, {}, lambda session, ti, case: requeue(session=session, ti=ti), states.SCHEDULED),
    "succeed": ("a", states.RUNNING, {}, outcome("success"), states.SUCCESS),
    "fail_for_retry": ("a", states.RUNNING, {"max_tries": 1}, outcome("failed"), states.UP_FOR_RETRY),
    "fail": ("a", states.RUNNING, {"max_tries": 0}, outcome("failed"), states.FAILED),
    "infra_fail": ("a", states.RUNNING, {"max_infra_attempts": 0}, outcome("unexecutable", "evicted"),
                   states.INFRA_FAILED),
    "replace_after_infra_fault": ("a", states.RUNNING, {"max_infra_attempts": 3}, outcome("unexecutable", "evicted"),
                                  states.SCHEDULED),
    "reschedule": ("a", states.RUNNING, {}, outcome("rescheduled", reschedule_at=utcnow() + timedelta(hours=1)),
                   states.UP_FOR_RESCHEDULE),
    "reset_for_retry": ("a", states.RUNNING, {"next_eligible_at": utcnow() - timedelta(seconds=1)},
                        promotion(states.RESET_FOR_RETRY), states.SCHEDULED),
    "redispatch_after_reschedule": ("a", states.RUNNING, {"next_eligible_at": utcnow() - timedelta(seconds=1)},
                                    promotion(states.REDISPATCH_AFTER_RESCHEDULE), states.SCHEDULED),
    "ready": ("t", states.SUCCESS, {}, refresh(), states.SCHEDULED),
    "upstream_fail": ("t", states.FAILED, {}, refresh(), states.UPSTREAM_FAILED),
    "reopen": ("t", states.RUNNING, {}, refresh(reopen=True), states.NONE),
    "clear": ("t", states.RUNNING, {}, lambda session, ti, case: clear(session=session, ti=ti), states.NONE),
    "clear_failed": ("t", states.RUNNING, {}, lambda session, ti, case: operator.clear_failed(
        session=session, dag_run_id=case.dag_run_id), states.NONE),
    "mark_success": ("a", states.RUNNING, {},
                     lambda session, ti, case: mark_state(session=session, ti=ti, state=states.SUCCESS),
                     states.SUCCESS),
    "mark_failed": ("a", states.RUNNING, {},
                    lambda session, ti, case: mark_state(session=session, ti=ti, state=states.FAILED),
                    states.FAILED),
    "cancel": ("a", states.RUNNING, {}, lambda session, ti, case: cancel(session=session, ti=ti), states.FAILED),
    "skip": ("a", states.RUNNING, {}, lambda session, ti, case: skip(session=session, ti=ti), states.SKIPPED),
    "replace": ("a", states.RUNNING, {"max_infra_attempts": 3}, lambda session, ti, case: operator.replace(
        session=session, ti=ti), states.SCHEDULED),
    "agent_lost": ("a", states.RUNNING, {"max_infra_attempts": 3}, reaper_mark("agent_lost"), states.SCHEDULED),
    "dispatch_lost": ("a", states.RUNNING, {"max_infra_attempts": 3}, reaper_mark("dispatch_lost"), states.SCHEDULED),
    "worker_lost": ("a", states.RUNNING, {"max_infra_attempts": 3}, reaper_mark("worker_lost"), states.SCHEDULED),
}


def test_every_rail_of_the_table_is_checked_here():
    assert set(SPECS) == {rail.name for rail in states.RAILS}


def test_every_attempt_starts_on_a_new_epoch():
    """The fencing token (contract 11.1) strictly increases across attempts: a rail into a state
    an attempt runs in bumps the epoch, save `start`, which is the same attempt acknowledging
    its start."""
    into_flight = [rail for rail in states.RAILS if rail.target in states.IN_FLIGHT and rail is not states.START]
    assert into_flight == [states.CLAIM] and all(rail.new_epoch for rail in into_flight)
    assert states.START.sources == {states.QUEUED} and not states.START.new_epoch


def _row(engine: Any, ti_id: uuid.UUID) -> tuple[str, int, int]:
    with Session(engine) as session:
        ti = session.execute(select(TaskInstance).where(TaskInstance.id == ti_id)).scalar_one()
        return ti.state, ti.try_number, ti.attempt_epoch


@pytest.mark.parametrize("rail", states.RAILS, ids=[rail.name for rail in states.RAILS])
def test_each_rail_moves_only_from_its_sources(rail, operator, engine):
    which, up_state, values, take, target = SPECS[rail.name]
    execution_id = uuid.UUID(Worker(operator).execution_id)
    for n, state in enumerate(states.State):
        run = operator.create_run(task("a"), task("up"), task("t", "up"), run_id=f"r{n}")
        ids = {k: uuid.UUID(v) for k, v in ti_ids(run).items()}
        with Session(engine) as session:  # test set-up: the rows as the case needs them
            session.execute(update(TaskInstance).where(TaskInstance.id == ids["up"]).values(state=up_state))
            session.execute(update(TaskInstance).where(TaskInstance.id == ids[which]).values(
                state=state, try_number=1, attempt_epoch=5, execution_id=execution_id, **values))
            session.commit()
        before = _row(engine, ids[which])
        case = Case(ids[which], _run_id(engine, ids[which]), execution_id)
        with Session(engine) as session:
            ti = session.get(TaskInstance, ids[which])
            try:
                take(session, ti, case)
                session.commit()
            except AppError:
                session.rollback()
        after = _row(engine, ids[which])
        if state in rail.sources:
            expected_epoch = before[2] + 1 if rail.new_epoch else before[2]
            assert (after[0], after[2]) == (target, expected_epoch), f"{rail.name} from {state}"
        else:
            assert after == before, f"{rail.name} moved a row out of {state}"


def _run_id(engine: Any, ti_id: uuid.UUID) -> uuid.UUID:
    with Session(engine) as session:
        return session.execute(select(TaskInstance.dag_run_id).where(TaskInstance.id == ti_id)).scalar_one()
