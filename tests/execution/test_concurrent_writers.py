"""Concurrent writers never surface as errors (contract 2.12; decision 0013): the mix of
claims, batches, single reports, clears, clear-faileds and sweeps answers no 500 and settles
each attempt once; a deadlock is run again, and one that persists is 503 with Retry-After."""

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest
from sqlalchemy import Engine, text

from app.db import retries
from app.main import create_app
from tests.support.api import Operator, Worker, assert_problem, json_of, task
from tests.support.concurrency import wait_for_lock_waits
from tests.support.mix import audit, run_mix
from tests.support.scrape import sample
from tests.support.servers import LiveServer
from tests.support.settings import app_settings

# What the mix's sweeps need to find: attempts whose agent went quiet, claims never started.
CONFLICTS = "fenceline_database_conflicts_total"
SWEEPING = {"agent_lost_after_seconds": 1, "dispatch_lost_after_seconds": 2, "reaper_interval_seconds": 0.5}


class TestTheMix:
    def test_no_answer_is_a_500_and_every_settle_happens_once(self, db_url, engine, is_postgres):
        """Two workers (three threads each) claim and report, in batches and alone, while two
        operators clear, clear runs' failures, sweep and create runs, and the reaper sweeps on
        its own: for 15 s on PostgreSQL (5 s on SQLite, whose writers take turns), and on until 51
        settles were acknowledged (a loaded machine settles fewer a second). Before the
        lock order, 1 to 4 answers of such a run were 500 (a deadlock)."""
        with LiveServer(create_app(app_settings(db_url, **SWEEPING))) as server, server.client() as client:
            tally = run_mix(server.url, Operator(client), 15 if is_postgres else 5, threads=3, operators=2,
                            settles=51)
        statuses = tally.by_status()
        assert statuses[500] == 0 and statuses[0] == 0, tally.statuses
        assert not tally.unanswered
        assert audit(engine, tally) == []
        routes = {route for route, status in tally.statuses if status < 300}
        assert routes >= {"claim", "batch", "report", "clear", "clear-failed", "reap", "create"}, routes
        assert len(tally.acknowledged) > 50


@contextmanager
def deadlocked(server: LiveServer, engine: Engine, send: Callable[[httpx.Client], httpx.Response],
               held: str, then: str, **params: object) -> Iterator[Future]:
    """A request (`send`) that deadlocks with this test's own transaction: the test holds a row
    (the statement `held`), the request takes a lock and waits on that row, and the test then
    asks for the request's lock (`then`). The test's transaction waits longer than the
    server's before it looks for a deadlock, so the request's is the one rolled back. Yields the
    request's answer to come, while the test's transaction holds both locks; it is rolled back
    at the end."""
    with server.client() as http, ThreadPoolExecutor(1) as pool, engine.connect() as conn:
        try:
            conn.execute(text("SET LOCAL deadlock_timeout = '30s'"))
            conn.execute(text(held), params)
            answer = pool.submit(send, http)
            wait_for_lock_waits(engine)  # the request holds its lock and waits on the row
            conn.execute(text(then), params)  # the request gave way
            yield answer
        finally:
            conn.rollback()


TI_ROW = "SELECT id FROM task_instances WHERE id = :ti FOR UPDATE"
POOL_ROW = "SELECT name FROM pools WHERE name = 'default_pool' FOR UPDATE"
RUN_ROW = "SELECT id FROM dag_runs WHERE id = (SELECT dag_run_id FROM task_instances WHERE id = :ti) FOR UPDATE"


@contextmanager
def deadlocked_claim(server: LiveServer, engine: Engine, operator: Operator) -> Iterator[Future]:
    """A claim that holds the default pool's lock and waits on the task instance's row."""
    run = operator.create_run(task("a"))
    worker = Worker(operator)
    with deadlocked(server, engine, lambda http: http.post("/v1/dispatch/claim", json={"limit": 1},
                                                          headers=worker.headers, timeout=60),
                    TI_ROW, POOL_ROW, ti=run["task_instances"][0]["ti_id"]) as answer:
        yield answer


@pytest.mark.postgres_only("deadlocks are PostgreSQL's: SQLite's writers take turns")
class TestDeadlocks:
    def test_a_deadlock_is_run_again_and_the_claim_succeeds(self, live_server, engine):
        with live_server.client() as client:
            operator = Operator(client)
            before = sample(operator, CONFLICTS, kind="deadlock", outcome="retried")
            with deadlocked_claim(live_server, engine, operator) as answer:
                wait_for_lock_waits(engine)  # run again, the claim waits for the pool
            (item,) = json_of(answer.result(timeout=60))["items"]
            assert item["correlation"]["attempt_epoch"] == 1
            assert sample(operator, CONFLICTS, kind="deadlock", outcome="retried") == before + 1

    def test_a_deadlock_that_persists_is_503_with_retry_after_and_writes_nothing(self, live_server, engine,
                                                                                 monkeypatch):
        monkeypatch.setattr(retries, "RUNS", 1)  # the first conflict persists
        with live_server.client() as client:
            operator = Operator(client)
            before = sample(operator, CONFLICTS, kind="deadlock", outcome="refused")
            with deadlocked_claim(live_server, engine, operator) as answer:
                resp = answer.result(timeout=60)
            problem = assert_problem(resp, 503, "database-conflict")
            assert resp.headers["Retry-After"] == "1"
            assert "Retry the request" in problem["detail"]
            assert sample(operator, CONFLICTS, kind="deadlock", outcome="refused") == before + 1
            (ti,) = operator.run()["task_instances"]
            assert (ti["state"], ti["attempt_epoch"]) == ("scheduled", 0)

    def test_a_deadlocked_report_is_run_again_and_settles_once(self, live_server, engine):
        """A sync route's transaction (app/web/routes.py): the report holds the run's lock and
        waits on the task instance's row."""
        with live_server.client() as client:
            operator = Operator(client)
            operator.create_run(task("a"))
            attempt = Worker(operator).claim_one()
            attempt.report("running")
            before = sample(operator, CONFLICTS, kind="deadlock", outcome="retried")
            send = lambda http: attempt.on(http).send("success")  # noqa: E731
            with deadlocked(live_server, engine, send, TI_ROW, RUN_ROW, ti=attempt.ti_id) as answer:
                wait_for_lock_waits(engine)  # run again, the report waits for the run
            assert json_of(answer.result(timeout=60))["state"] == "success"
            assert sample(operator, CONFLICTS, kind="deadlock", outcome="retried") == before + 1
            (record,) = operator.attempts(attempt.ti_id)
            assert (record["state"], record["attempt_epoch"]) == ("success", 1)
