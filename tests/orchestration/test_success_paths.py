"""The two ways a success settles agree (issue 27): the hot path (outcomes.settle_success: one
guarded statement that on PostgreSQL archives the try itself, then readiness of the succeeded
task's waiting downstream only, readiness.ready_downstream) and the general rails
(outcomes.apply_outcome: the rail's CAS, archive_try, then readiness of the whole run,
readiness.refresh_run) leave the same task instances, archived tries and run state behind."""

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, select, update
from sqlmodel import Session

from app.db.types import utcnow
from app.orchestration import states
from app.orchestration.cas import HISTORY, RUNS, TI, lock_run_of
from app.orchestration.models import TaskInstance
from app.orchestration.outcomes import InfraBackoff, Outcome, apply_outcome, settle_success
from tests.support.api import task

# name -> (the run's tasks, the state each task but "a" is put in, the states a success of "a"
#          leaves: of the run, and of each task whose state it changes)
SCENARIOS: dict[str, tuple[list[dict[str, Any]], dict[str, states.State], dict[str, str]]] = {
    "alone: the run succeeds": ([task("a")], {}, {"run": states.SUCCESS}),
    "another runs: the run runs": ([task("a"), task("b")], {"b": states.RUNNING}, {"run": "running"}),
    "the last, another failed: the run fails": ([task("a"), task("b")], {"b": states.FAILED}, {"run": states.FAILED}),
    "a chain: the next is ready": ([task("a"), task("b", "a"), task("c", "b")], {"b": states.NONE, "c": states.NONE},
                                   {"run": "running", "b": states.SCHEDULED}),
    "a join, one upstream runs: it waits": ([task("a"), task("b"), task("c", "a", "b")],
                                            {"b": states.RUNNING, "c": states.NONE}, {"run": "running"}),
    "a join, the others succeeded: it is ready": ([task("a"), task("b"), task("c", "a", "b")],
                                                  {"b": states.SUCCESS, "c": states.NONE},
                                                  {"run": "running", "c": states.SCHEDULED}),
    "a join, an upstream failed unpropagated: it fails": ([task("a"), task("b"), task("c", "a", "b")],
                                                          {"b": states.FAILED, "c": states.NONE},
                                                          {"run": states.FAILED, "c": states.UPSTREAM_FAILED}),
    "a fan-out, with a waiting grandchild": ([task("a"), task("b", "a"), task("d", "a"), task("c", "b", "d")],
                                             {"b": states.NONE, "c": states.NONE, "d": states.NONE},
                                             {"run": "running", "b": states.SCHEDULED, "d": states.SCHEDULED}),
    "a mapped upstream, one index runs: it waits": (
        [task("a", map_index=0), task("a", map_index=1), task("b", "a")], {"a[1]": states.RUNNING, "b": states.NONE},
        {"run": "running"}),
    "a mapped upstream, the other index succeeded: it is ready": (
        [task("a", map_index=0), task("a", map_index=1), task("b", "a")], {"a[1]": states.SUCCESS, "b": states.NONE},
        {"run": "running", "b": states.SCHEDULED}),
}


def _name(ti: dict[str, Any]) -> str:
    return ti["task_id"] if ti["map_index"] <= 0 else f"{ti['task_id']}[{ti['map_index']}]"


def _set_up(operator: Any, engine: Engine, tasks: list[dict[str, Any]], given: dict[str, states.State],
            run_id: str, before: datetime) -> uuid.UUID:
    """The run with "a" (index 0 if mapped) running its second try since `before`, the others
    as `given` says; answers the id of "a"."""
    run = operator.create_run(*tasks, run_id=run_id)
    ids = {_name(ti): uuid.UUID(ti["ti_id"]) for ti in run["task_instances"]}
    with Session(engine) as session:
        for name, ti_id in ids.items():
            session.execute(update(TaskInstance).where(TaskInstance.id == ti_id).values(
                state=given.get(name, states.SCHEDULED), updated_at=before))
        session.execute(update(TaskInstance).where(TaskInstance.id == ids["a"]).values(
            state=states.RUNNING, try_number=2, max_tries=2, attempt_epoch=3, infra_attempts=1, queued_at=before,
            started_at=before, user_code_started=True, last_failure_kind="app", last_failure_reason="flaky"))
        session.commit()
    return ids["a"]


def _hot_path(engine: Engine, ti_id: uuid.UUID, now: datetime) -> None:
    with Session(engine) as session:
        assert lock_run_of(session, ti_id)
        assert settle_success(session=session, ti_id=ti_id, try_number=2, attempt_epoch=3, now=now) is not None
        session.commit()


def _general_rails(engine: Engine, ti_id: uuid.UUID, now: datetime) -> None:
    with Session(engine) as session:
        ti = session.get(TaskInstance, ti_id)
        assert apply_outcome(session=session, ti=ti, outcome=Outcome("success"), backoff=InfraBackoff(0, 0),
                             now=now) is not None
        session.commit()


def _left_behind(engine: Engine, run_id: str) -> dict[str, Any]:
    """What a settled success leaves, without what names the run: the task instances and the
    archived tries by task, and the run's state and end. (The hot path leaves a run it need not
    settle untouched, so the run's updated_at may differ; that is not an answer.)"""
    with Session(engine) as session:
        run = session.execute(select(RUNS).where(RUNS.c.run_id == run_id)).one()
        tis = session.execute(select(TI).where(TI.c.dag_run_id == run.id)).mappings().all()
        tries = session.execute(select(HISTORY, TI.c.task_id, TI.c.map_index).join(
            TI, TI.c.id == HISTORY.c.task_instance_id).where(TI.c.dag_run_id == run.id)).mappings().all()

    def without(row: Any, *names: str) -> dict[str, Any]:
        return {k: v for k, v in row.items() if k not in names}

    return {
        "run": (run.state, run.ended_at),
        "task_instances": sorted((without(ti, "id", "dag_run_id", "run_id", "created_at") for ti in tis),
                                 key=lambda ti: (ti["task_id"], ti["map_index"])),
        "tries": sorted((without(t, "id", "task_instance_id") for t in tries),
                        key=lambda t: (t["task_id"], t["map_index"], t["try_number"])),
    }


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_hot_path_and_the_general_rails_leave_the_same_rows(scenario, operator, engine):
    tasks, given, expected = SCENARIOS[scenario]
    now = utcnow()
    before, left = now - timedelta(hours=1), {}
    for path in (_hot_path, _general_rails):
        run_id = path.__name__
        path(engine, _set_up(operator, engine, tasks, given, run_id, before), now)
        left[path.__name__] = _left_behind(engine, run_id)
    hot = left["_hot_path"]
    assert hot == left["_general_rails"]
    changed = {_name(ti): ti["state"] for ti in hot["task_instances"] if ti["state"] != given.get(_name(ti))}
    assert {"run": hot["run"][0], **changed} == {**expected, "a": states.SUCCESS}
    assert [(t["task_id"], t["try_number"], t["attempt_epoch"], t["state"]) for t in hot["tries"]] == [
        ("a", 2, 3, states.SUCCESS)]
