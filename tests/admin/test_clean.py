"""`fenceline db clean` and FENCELINE_HISTORY_RETENTION_DAYS (app/admin/clean.py): finished runs
that ended before the date go with everything kept of them, every log store included; nothing
else does, and nothing a fence relies on."""

from datetime import timedelta

import pytest
from sqlalchemy import func, select, text
from sqlmodel import Session

from app.admin.clean import Counts, HistoryRetention, clean, delete_runs, mark_runs, plan
from app.db.types import utcnow
from app.execution.models import TaskAttempt
from app.identity.models import Execution, Seat
from app.logs.models import LogRemoval
from app.orchestration.models import DagRun, TaskInstance, TaskInstanceHistory
from tests.support.api import Operator, Worker, kube_target, task
from tests.support.history import finished
from tests.support.logs import store_client

TABLES = {"dag_runs": DagRun, "task_instances": TaskInstance, "task_instance_history": TaskInstanceHistory,
          "task_attempts": TaskAttempt, "log_removals": LogRemoval, "executions": Execution, "seats": Seat}
TRIES = "/api/v2/dags/{dag}/dagRuns/{run}/taskInstances/t/tries"


@pytest.fixture
def client(store_name, shared_apps):
    with store_client(store_name, shared_apps) as client:
        yield client


@pytest.fixture
def store(client):
    return client.app.state.log_store


def rows(engine) -> dict[str, int]:
    with Session(engine) as session:
        return {name: session.execute(select(func.count()).select_from(model)).scalar_one()
                for name, model in TABLES.items()}


def runs(engine) -> set[tuple[str, str]]:
    with Session(engine) as session:
        return set(session.execute(select(DagRun.dag_id, DagRun.run_id)).tuples())


def cutoff(days: float = 30):
    return utcnow() - timedelta(days=days)


class TestDryRun:
    def test_counts_what_would_go_and_changes_nothing(self, operator, engine, store):
        finished(operator, "old")
        finished(operator, "older", fail=True, days_ago=50)
        finished(operator, "recent", days_ago=10)
        before, keys = rows(engine), sorted(store.keys())
        with Session(engine) as session:
            counts = plan(session=session, before=cutoff())
        # Two runs of two tasks; `t` tried twice: 3 attempts and 3 archived tries per run.
        assert counts.tables() == {"dag_runs": 2, "task_instances": 4, "task_instance_history": 6,
                                   "task_attempts": 6, "log_removals": 0, "log_streams": 6 + 6}
        assert rows(engine) == before and sorted(store.keys()) == keys


class TestClean:
    def test_deletes_only_finished_runs_that_ended_before_the_date(self, operator, engine, store):
        finished(operator, "old")
        finished(operator, "failed", fail=True)
        finished(operator, "recent", days_ago=10)
        operator.create_run(task("t"), run_id="running")
        Worker(operator, seat="busy").claim_one().report("running")
        operator.create_run(task("t"), run_id="queued")
        Worker(operator, seat="holder").claim_one()
        operator.create_run(task("t"), task("w", "t"), run_id="waiting")
        with Session(engine) as session:
            planned = plan(session=session, before=cutoff())
        recent = {"runs": operator.get(TRIES.format(dag="dag", run="recent")).json(),
                  "run": operator.get("/api/v2/dags/dag/dagRuns/recent").json()}
        done = clean(engine, store, before=cutoff())
        # The plan counts the retention records there are; the clean also deletes those it wrote.
        assert {**done.tables(), "log_removals": 0} == planned.tables() and done.log_removals == 2
        assert done.dag_runs == 2 and done.skipped == []
        assert runs(engine) == {("dag", r) for r in ("recent", "running", "queued", "waiting")}
        assert not [k for k in store.keys() if "/old/" in k or "/failed/" in k]
        assert [k for k in store.keys() if "/recent/" in k]
        for run in ("old", "failed"):  # the Airflow faces answer 404, as for a run that never was
            assert operator.get(f"/api/v2/dags/dag/dagRuns/{run}").status_code == 404
            assert operator.get(TRIES.format(dag="dag", run=run)).status_code == 404
            assert operator.get(f"/api/v1/dags/dag/dagRuns/{run}/taskInstances").status_code == 404
        assert {r["dag_run_id"] for r in operator.get("/api/v2/dags/~/dagRuns").json()["dag_runs"]} == \
            {"recent", "running", "queued", "waiting"}
        assert operator.get(TRIES.format(dag="dag", run="recent")).json() == recent["runs"]
        assert operator.get("/api/v2/dags/dag/dagRuns/recent").json() == recent["run"]
        assert clean(engine, store, before=cutoff()).tables() == Counts().tables()

    def test_keeps_what_a_fence_relies_on(self, operator, engine, store):
        """Seats and executions (every generation, every pod UID bound) stay, and a pod UID of
        a deleted run's execution is still refused to a new one."""
        admitted = operator.admit("pod-seat", backend="kubernetes", target=kube_target("uid-old"))
        first = Worker(operator, seat="worker-a")
        finished(operator, "old", worker=first)
        finished(operator, "older", worker=first.replacement())  # generation 2 of the seat
        before = rows(engine)
        assert clean(engine, store, before=cutoff()).dag_runs == 2
        after = rows(engine)
        assert (after["executions"], after["seats"]) == (before["executions"], before["seats"])
        again = operator.admission("other-seat", backend="kubernetes", target=kube_target("uid-old"))
        assert again.status_code == 409
        execution = operator.get(f"/v1/executions/{admitted['execution_id']}").json()
        assert execution["runtime_target"]["pod_uid"] == "uid-old"
        generations = [e["generation"] for e in operator.get("/v1/seats/worker-a/executions").json()["items"]]
        assert sorted(generations) == [1, 2]

    def test_keep_last_keeps_each_dags_newest_runs(self, operator, engine, store):
        for n in range(4):
            finished(operator, f"a{n}", dag_id="a", days_ago=40 + n)  # a0 the newest
        finished(operator, "b0", dag_id="b", days_ago=60)
        finished(operator, "b1", dag_id="b", days_ago=1)  # b's newest, recent anyway
        with Session(engine) as session:
            planned = plan(session=session, before=cutoff(), keep_last=2)
        done = clean(engine, store, before=cutoff(), keep_last=2)
        assert planned.dag_runs == done.dag_runs == 2
        assert runs(engine) == {("a", "a0"), ("a", "a1"), ("b", "b0"), ("b", "b1")}
        assert clean(engine, store, before=cutoff(), keep_last=1).dag_runs == 2
        assert runs(engine) == {("a", "a0"), ("b", "b1")}

    def test_an_interrupted_clean_leaves_a_consistent_database_and_the_next_finishes(self, operator, engine, store):
        for n in range(3):
            finished(operator, f"r{n}", days_ago=40 + n)
        first = clean(engine, store, before=cutoff(), batch_runs=1, batches=1)  # stopped after one batch
        assert first.dag_runs == 1 and runs(engine) == {("dag", "r0"), ("dag", "r1")}
        for run in ("r0", "r1"):
            ti = operator.find_ti("t", run_id=run)
            assert operator.log(ti["ti_id"], 2).endswith(f"{run} {ti['ti_id']}\n")
            assert len(operator.attempts(ti["ti_id"])) == 2
        seen = []
        rest = clean(engine, store, before=cutoff(), batch_runs=1, progress=lambda c: seen.append(c.dag_runs))
        assert rest.dag_runs == 2 and seen == [1, 2] and runs(engine) == set()
        assert list(store.keys()) == [] and rows(engine)["task_attempts"] == 0

    def test_logs_removed_before_a_crash_read_as_empty_until_the_clean_is_run_again(self, operator, engine, store):
        """A batch that removed the logs and was rolled back (killed before its commit) leaves
        its rows, whose logs read as removed (never a stream the store lost: S3's index would
        answer 503); the next clean deletes them."""
        finished(operator, "old")
        with Session(engine) as session:
            (run,) = session.execute(select(DagRun.id)).scalars()
            assert mark_runs(session=session, run_ids=[run], before=cutoff(), now=utcnow()) == [run]
            session.commit()
            assert delete_runs(session=session, store=store, run_ids=[run], before=cutoff()).dag_runs == 1
            session.rollback()
        ti = operator.find_ti("u", run_id="old")["ti_id"]
        lines = operator.log(ti).splitlines()
        assert lines[0].startswith("::fenceline:: try 1 epoch 1") and "removed by retention" in lines[-1]
        v2 = operator.get("/api/v2/dags/dag/dagRuns/old/taskInstances/u/logs/1")
        assert v2.status_code == 200 and "removed by retention" in v2.text
        assert clean(engine, store, before=cutoff()).dag_runs == 1 and runs(engine) == set()


class TestHistoryRetention:
    def test_a_sweep_deletes_a_bounded_number_of_expired_runs(self, operator, engine, store):
        for n in range(3):
            finished(operator, f"r{n}", days_ago=40 + n)
        finished(operator, "recent", days_ago=10)
        retention = HistoryRetention(store, 30)
        left = []
        for _ in range(4):  # one sweep marks a few runs' logs removed, a later one deletes them
            with Session(engine) as session:
                retention.sweep(session=session, now=utcnow(), limit=2)
                session.commit()
            left.append(len(runs(engine)))
        assert left == [4, 2, 2, 1] and runs(engine) == {("dag", "recent")}
        assert not [k for k in store.keys() if "/recent/" not in k]

    def test_the_reaper_sweep_deletes_them_when_it_is_set(self, make_client, engine):
        operator = Operator(make_client(history_retention_days=30))
        finished(operator, "old")
        finished(operator, "recent", days_ago=10)
        operator.reap()  # marks the old run's logs removed
        operator.reap()  # deletes it
        assert runs(engine) == {("dag", "recent")}

    def test_the_setting_is_validated(self, db_url):
        from pydantic import ValidationError

        from tests.support.settings import app_settings

        with pytest.raises(ValidationError, match="history_retention_days"):
            app_settings(db_url, history_retention_days=0)


@pytest.mark.postgres_only("row locks: SQLite's writers take turns")
class TestWhileTheServiceRuns:
    def test_a_run_another_transaction_holds_is_left_and_never_waited_on(self, operator, engine, store):
        finished(operator, "held")
        finished(operator, "free")
        with engine.connect() as holder:  # as a clear holds its run
            holder.execute(text("SELECT id FROM dag_runs WHERE run_id = 'held' FOR NO KEY UPDATE"))
            done = clean(engine, store, before=cutoff())
            holder.rollback()
        assert done.dag_runs == 1 and len(done.skipped) == 1 and runs(engine) == {("dag", "held")}

    def test_a_claim_proceeds_while_a_clean_batch_holds_its_locks(self, operator, engine, store):
        finished(operator, "old")
        operator.create_run(task("t"), run_id="new")
        with Session(engine) as session:
            (run,) = session.execute(select(DagRun.id).where(DagRun.run_id == "old")).scalars()
            mark_runs(session=session, run_ids=[run], before=cutoff(), now=utcnow())
            session.commit()
            assert delete_runs(session=session, store=store, run_ids=[run], before=cutoff()).dag_runs == 1
            attempt = Worker(operator, seat="claimer").claim_one()  # on another connection, meanwhile
            attempt.report("success")
            session.commit()
        assert runs(engine) == {("dag", "new")} and operator.run("dag", "new")["state"] == "success"
