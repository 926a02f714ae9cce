"""Retention: the logs of runs that ended before FENCELINE_LOG_RETENTION_DAYS are removed in the
reaper's sweep, a bounded number of runs at a time, on every store; a removed log still reads."""

from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlmodel import Session

from app.db.types import utcnow
from app.logs.retention import Retention
from app.orchestration.models import DagRun
from tests.support.api import Operator, Worker, task, ti_ids
from tests.support.logs import store_client

V2 = "/api/v2/dags/dag/dagRuns/{run}/taskInstances/t/logs/1"


@pytest.fixture
def operator(store_name, shared_apps):
    with store_client(store_name, shared_apps, log_retention_days=30) as client:
        yield Operator(client)


def finished(operator, run_id: str, line: str) -> str:
    """A run whose one task logged `line` and succeeded; answers the task instance's id."""
    operator.create_run(task("t", retries=1), run_id=run_id)
    attempt = Worker(operator, seat=f"worker-{run_id}").claim_one()
    attempt.append_log(0, line)
    attempt.report("success")
    return attempt.ti_id


def ended_days_ago(engine, run_id: str, days: int) -> None:
    with engine.begin() as conn:
        conn.execute(update(DagRun).where(DagRun.run_id == run_id).values(ended_at=utcnow() - timedelta(days=days)))


class TestRetention:
    def test_an_expired_log_reads_as_its_system_lines_and_the_removal(self, operator, engine, store):
        old, recent = finished(operator, "old", "secret\n"), finished(operator, "recent", "kept\n")
        ended_days_ago(engine, "old", 31)
        ended_days_ago(engine, "recent", 29)
        operator.reap()
        lines = operator.log(old).splitlines()
        assert len(lines) == 2 and lines[0].startswith("::fenceline:: try 1 epoch 1")
        assert lines[1].startswith("::fenceline:: log removed by retention on ")
        assert operator.log(recent).endswith("\nkept\n")
        assert [k for k in store.keys() if "/old/" in k] == []
        events = [m["event"] for m in operator.get(V2.format(run="old")).json()["content"]]
        assert events == lines  # the Airflow route shows the same text, never an error
        v1 = operator.get(V2.format(run="old").replace("/api/v2", "/api/v1"), headers={"Accept": "text/plain"})
        assert v1.status_code == 200 and v1.text.splitlines() == lines

    def test_a_run_cleared_after_removal_keeps_its_new_try(self, operator, engine):
        ti = finished(operator, "old", "first try\n")
        ended_days_ago(engine, "old", 31)
        operator.reap()
        operator.post(f"/v1/task-instances/{ti}/clear").raise_for_status()
        attempt = Worker(operator, seat="worker-again").claim_one()
        attempt.append_log(0, "second try\n")
        attempt.report("success")
        operator.reap()  # ended again just now: not due
        assert operator.log(ti, 2).endswith("\nsecond try\n")
        assert "removed by retention" in operator.log(ti, 1)
        ended_days_ago(engine, "old", 31)  # and when the second end is old too, it goes as well
        operator.reap()
        assert "removed by retention" in operator.log(ti, 2)

    def test_a_try_without_attempt_records_reads_as_removed_too(self, operator, engine, store, put):
        """A try no claim ever ran (its log a legacy object, the task marked done) has no
        attempt record to carry its run's removal: the removal is read on its own."""
        run = operator.create_run(task("t"), run_id="old")
        ti = ti_ids(run)["t"]
        put("dag/old/t/-1/1.log", b"from before the fence\n")
        operator.post(f"/v1/task-instances/{ti}/mark", json={"state": "success"}).raise_for_status()
        ended_days_ago(engine, "old", 31)
        operator.reap()
        lines = operator.log(ti).splitlines()
        assert len(lines) == 1 and lines[0].startswith("::fenceline:: log removed by retention on ")

    def test_a_sweep_removes_a_bounded_number_of_runs(self, operator, engine, store):
        for run in ("a", "b", "c"):
            finished(operator, run, f"{run}\n")
            ended_days_ago(engine, run, 40)
        retention = Retention(store, 30)
        done = []
        for _ in range(3):
            with Session(engine) as session:
                done.append(retention.sweep(session=session, now=utcnow(), limit=2))
                session.commit()
        assert done == [2, 1, 0]
        assert list(store.keys()) == []
