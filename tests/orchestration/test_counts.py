"""The kept counts (app/orchestration/counts.py, migration 0015's triggers): after every change
through the service's own paths, the counts plus the deltas not yet folded, and after a fold
the counts alone, equal a count of the task instances; exact under real concurrency."""

import threading
from datetime import timedelta

import pytest
from sqlalchemy import text, update
from sqlmodel import Session

from app.admin.clean import clean
from app.db.types import utcnow
from app.orchestration import states
from app.orchestration.counts import count_task_instances, unmapped_per_dag
from app.orchestration.models import TaskInstance
from tests.support.api import Worker, task, ti_ids
from tests.support.counts import assert_exact, counted, deltas, fold, kept
from tests.support.history import finished


class TestKeptExact:
    def test_through_runs_claims_outcomes_and_operator_rails(self, operator, engine):
        assert_exact(engine)  # nothing yet
        run = operator.create_run(task("a", retries=1), task("b", "a"), {**task("m"), "map_index": 0},
                                  {**task("m"), "map_index": 1}, dag_id="etl", run_id="r1")
        operator.create_run(task("x"), dag_id="report", run_id="r1")
        assert kept(engine) == counted(engine)
        worker = Worker(operator, seat="w1")
        claimed = worker.claim(10)
        assert_exact(engine)
        for attempt in claimed:
            attempt.report({"a": "failed", "m": "success"}.get(attempt.task_id, "running"))
        assert kept(engine) == counted(engine)  # a's retry, m's successes, x running; unfolded
        operator.reap()  # a's retry is due
        for attempt in worker.claim(10):
            attempt.report("success")  # a's second try: b becomes ready
        assert_exact(engine)
        assert operator.post(f"/v1/task-instances/{ti_ids(run)['b']}/mark", json={"state": "failed"}).status_code == 200
        assert kept(engine) == counted(engine)
        assert operator.post(f"/v1/task-instances/{ti_ids(run)['a']}/clear").status_code == 200
        assert_exact(engine)
        assert operator.post("/v1/runs/etl/r1/clear-failed").status_code == 200
        assert operator.post("/v1/runs/report/r1/cancel").status_code == 200
        assert_exact(engine)
        operator.reap()  # the sweep folds
        assert deltas(engine) == 0 and kept(engine, with_deltas=False) == counted(engine)

    def test_through_db_clean(self, operator, engine):
        for n in range(3):
            finished(operator, f"old{n}", dag_id="etl" if n else "report", fail=n == 2)
        finished(operator, "recent", days_ago=1)
        assert_exact(engine)
        done = clean(engine, operator.client.app.state.log_store, before=utcnow() - timedelta(days=30))
        assert done.task_instances == 6
        assert kept(engine) == counted(engine) == {("dag", "success", False): 2}
        assert_exact(engine)

    def test_a_count_that_reaches_zero_is_dropped(self, operator, engine):
        operator.create_run(task("a"))
        fold(engine)
        Worker(operator).claim_one()
        fold(engine)
        assert kept(engine, with_deltas=False) == {("dag", "queued", False): 1}


class TestCounting:
    def test_by_states_and_dag_before_and_after_a_fold(self, operator, engine):
        operator.create_run(task("a"), task("b", "a"), dag_id="d1")
        Worker(operator).claim_one().report("success")
        operator.create_run(task("a"), {**task("m"), "map_index": 0}, dag_id="d2")
        for folded in (False, True):
            if folded:
                fold(engine)
            with Session(engine) as session:
                assert count_task_instances(session=session) == 4
                assert count_task_instances(session=session, states=[states.SCHEDULED]) == 3
                assert count_task_instances(session=session, states=[states.SCHEDULED, states.NONE], dag_id="d1") == 1
                assert count_task_instances(session=session, states=[]) == 0
                assert count_task_instances(session=session, dag_id="nope") == 0
                # d2's mapped task instance is not among the unmapped ones.
                assert unmapped_per_dag(session=session, states=[states.SCHEDULED]) == [("d1", 1), ("d2", 1)]
                assert unmapped_per_dag(session=session) == [("d1", 2), ("d2", 1)]


@pytest.fixture
def postgres_only(is_postgres):
    if not is_postgres:
        pytest.skip("SQLite's writers take turns: no fold runs beside a writer")


class TestConcurrency:
    WRITERS, FLIPS, ROWS = 4, 60, 8

    def test_exact_while_writers_flip_states_and_a_fold_loops(self, postgres_only, operator, engine):
        """Writers flip their own rows between success and failed (each DAG's total of the two
        never moves) while one thread folds in a loop and another counts: every count read is
        exact, and the counts end equal to a count of the rows."""
        for n in range(self.WRITERS):
            operator.create_run(*(task(f"t{i}") for i in range(self.ROWS)), dag_id=f"d{n}", run_id="r")
        with engine.begin() as conn:
            conn.execute(update(TaskInstance).values(state=states.SUCCESS))
        done, wrong, reads = threading.Event(), [], [0]

        def write(dag_id: str) -> None:
            for flip in range(self.FLIPS):
                with Session(engine) as session:
                    session.execute(update(TaskInstance).where(TaskInstance.dag_id == dag_id,
                                                               TaskInstance.task_id == f"t{flip % self.ROWS}")
                                    .values(state=states.FAILED if flip // self.ROWS % 2 == 0 else states.SUCCESS))
                    session.commit()

        def fold_until_done() -> None:
            while not done.is_set():
                fold(engine)

        def count_until_done() -> None:
            while not done.is_set():
                with Session(engine) as session:
                    found = count_task_instances(session=session, states=[states.SUCCESS, states.FAILED])
                    of_one = count_task_instances(session=session, states=[states.SUCCESS, states.FAILED],
                                                  dag_id="d0")
                if (found, of_one) != (self.WRITERS * self.ROWS, self.ROWS):
                    wrong.append((found, of_one))
                reads[0] += 1

        helpers = [threading.Thread(target=fold_until_done), threading.Thread(target=count_until_done)]
        writers = [threading.Thread(target=write, args=(f"d{n}",)) for n in range(self.WRITERS)]
        for thread in helpers + writers:
            thread.start()
        for thread in writers:
            thread.join()
        done.set()
        for thread in helpers:
            thread.join()
        assert not wrong and reads[0] > 0
        assert_exact(engine)
        with engine.connect() as conn:  # the writers' flips did move rows between the states
            assert conn.execute(text("SELECT count(DISTINCT state) FROM task_instances")).scalar() == 2
