"""Runs and readiness (contract 2.1), and the operator rails: clear, clear-failed, mark."""

import pytest

from tests.support.api import Operator, Worker, assert_problem, assert_stale, json_of, task, ti_ids
from tests.support.concurrency import race


def states(operator) -> dict[str, str]:
    return {ti["task_id"]: ti["state"] for ti in operator.run()["task_instances"]}


class TestCreateRun:
    def test_tasks_without_upstreams_are_ready_the_rest_wait(self, operator):
        run = operator.create_run(task("a", retries=2), task("b", "a"))
        assert run["state"] == "running"
        a, b = sorted(run["task_instances"], key=lambda ti: ti["task_id"])
        assert (a["state"], a["try_number"], a["max_tries"], a["attempt_epoch"], a["infra_attempts"]) == (
            "scheduled", 1, 2, 0, 0)
        assert (b["state"], b["upstream"], b["execution_id"], b["last_failure_kind"]) == ("none", ["a"], None, None)

    def test_bad_run_is_422_naming_the_problem_and_creates_nothing(self, operator):
        for tasks, named in (
            ([task("a", "b"), task("b", "a")], "cycle"),
            ([task("a", "a")], "cycle"),
            ([task("a", "ghost")], "ghost"),
            ([task("a"), task("a")], "repeat"),
            ([{**task("a"), "priority": 3}], "priority"),
            ([{**task("a"), "payload": {"command": ["true"], "shell": True}}], "shell"),
            ([{**task("a"), "payload": {"args": ["x"]}}], "command or an image"),
            ([task("a", retries=-1)], "retries"),
            ([task("a bad id")], "task_id"),
            ([], "tasks"),
        ):
            resp = operator.post("/v1/runs", json={"dag_id": "dag", "run_id": "run", "tasks": tasks})
            assert resp.status_code == 422, tasks
            assert named in assert_problem(resp, 422, "validation-error")["detail"] + resp.text, resp.text
        assert operator.get("/v1/runs").json()["total_entries"] == 0
        assert operator.get("/v1/runs/dag/run").status_code == 404

    def test_duplicate_run_is_409_and_the_first_stays(self, operator):
        first = operator.create_run(task("a"))
        resp = operator.post("/v1/runs", json={"dag_id": "dag", "run_id": "run", "tasks": [task("x")]})
        assert_problem(resp, 409, "run-exists")
        assert operator.run() == first

    def test_listed_newest_first(self, operator):
        operator.create_run(task("a"), run_id="r1")
        operator.create_run(task("a"), run_id="r2")
        listed = operator.get("/v1/runs", params={"dag_id": "dag"}).json()
        assert [r["run_id"] for r in listed["items"]] == ["r2", "r1"]
        assert listed["total_entries"] == 2


class TestReadiness:
    def test_downstream_is_claimable_only_after_upstream_success(self, operator):
        operator.create_run(task("a"), task("b"), task("c", "a", "b"))
        worker = Worker(operator)
        a, b = worker.claim()
        a.report("success")
        assert states(operator)["c"] == "none"
        assert worker.claim() == []
        b.report("success")
        (c,) = worker.claim()
        assert (c.task_id, c.try_number, c.epoch) == ("c", 1, 1)

    def test_upstream_failure_fails_downstream_and_run(self, operator):
        operator.create_run(task("a"), task("b", "a"), task("c", "b"), task("d"))
        worker = Worker(operator)
        a, d = worker.claim()
        a.report("failed")
        assert states(operator) == {"a": "failed", "b": "upstream_failed", "c": "upstream_failed", "d": "queued"}
        assert operator.run()["state"] == "running"
        d.report("success")
        assert operator.run()["state"] == "failed"
        assert worker.claim() == []

    def test_a_retry_keeps_downstream_waiting(self, operator):
        operator.create_run(task("a", retries=1), task("b", "a"))
        worker = Worker(operator)
        worker.claim_one().report("failed")
        assert states(operator) == {"a": "up_for_retry", "b": "none"}
        worker.claim_one().report("success")
        assert worker.claim_one().task_id == "b"


class TestClear:
    def test_clear_of_a_running_task_fences_off_the_old_worker(self, operator):
        run = operator.create_run(task("a", retries=1))
        worker = Worker(operator)
        old = worker.claim_one()
        old.report("running")
        resp = operator.post(f"/v1/task-instances/{ti_ids(run)['a']}/clear")
        assert resp.status_code == 200, resp.text
        cleared = resp.json()
        assert (cleared["state"], cleared["try_number"], cleared["max_tries"], cleared["attempt_epoch"],
                cleared["execution_id"]) == ("scheduled", 2, 2, 2, None)
        assert_stale(old.send("success"))
        assert_stale(old.heartbeat())
        assert operator.ti(old.ti_id) == cleared
        new = worker.claim_one()
        assert (new.try_number, new.epoch) == (2, 3)
        attempts = operator.get(f"/v1/task-instances/{old.ti_id}/attempts").json()["items"]
        fenced = next(a for a in attempts if a["attempt_epoch"] == old.epoch)
        assert fenced["state"] == "cleared" and fenced["ended_at"] is not None

    def test_clear_of_a_finished_task_reopens_the_run(self, operator):
        run = operator.create_run(task("a"), task("b", "a"))
        worker = Worker(operator)
        worker.claim_one().report("success")
        worker.claim_one().report("success")
        assert operator.run()["state"] == "success"
        operator.post(f"/v1/task-instances/{ti_ids(run)['b']}/clear")
        assert operator.run()["state"] == "running"
        again = worker.claim_one()
        assert (again.task_id, again.try_number) == ("b", 2)
        again.report("success")
        assert operator.run()["state"] == "success"

    def test_a_cleared_try_starts_without_the_old_failure(self, operator):
        run = operator.create_run(task("a"))
        Worker(operator).claim_one().report("failed", reason="exit 3")
        failed = operator.ti(ti_ids(run)["a"])
        assert (failed["last_failure_kind"], failed["last_failure_reason"]) == ("app", "exit 3")
        cleared = json_of(operator.post(f"/v1/task-instances/{ti_ids(run)['a']}/clear"))
        assert (cleared["try_number"], cleared["last_failure_kind"], cleared["last_failure_reason"]) == (2, None, None)
        assert [(a["outcome_kind"], a["reason"]) for a in operator.attempts(ti_ids(run)["a"])] == [("app", "exit 3")]

    def test_clear_of_an_unknown_task_instance_is_404(self, operator):
        resp = operator.post("/v1/task-instances/00000000-0000-0000-0000-000000000000/clear")
        assert_problem(resp, 404, "task-instance-not-found")


class TestClearFailed:
    def test_failed_and_upstream_failed_are_cleared_the_rest_kept(self, operator):
        operator.create_run(task("a"), task("b", "a"), task("ok"))
        worker = Worker(operator)
        a, ok = worker.claim()
        ok.report("success")
        a.report("failed")
        resp = operator.post("/v1/runs/dag/run/clear-failed")
        assert resp.status_code == 200, resp.text
        by_task = {ti["task_id"]: ti for ti in resp.json()["task_instances"]}
        assert {t: (ti["state"], ti["try_number"]) for t, ti in by_task.items()} == {
            "a": ("scheduled", 2), "b": ("none", 1), "ok": ("success", 1)}
        assert resp.json()["state"] == "running"

    def test_a_cleared_task_that_never_ran_keeps_its_retry_budget(self, operator):
        """load (retries 0) never ran: its try 1 is reused and it still gets exactly one try."""
        operator.create_run(task("transform"), task("load", "transform"))
        worker = Worker(operator)
        worker.claim_one().report("failed")
        cleared = operator.post("/v1/runs/dag/run/clear-failed").json()["task_instances"]
        assert [(ti["task_id"], ti["try_number"], ti["max_tries"]) for ti in cleared] == [
            ("load", 1, 0), ("transform", 2, 1)]
        worker.claim_one().report("success")
        load = worker.claim_one()
        assert (load.task_id, load.try_number) == ("load", 1)
        assert load.report("failed")["state"] == "failed"
        assert operator.run()["state"] == "failed"

    def test_unknown_run_is_404(self, operator):
        assert_problem(operator.post("/v1/runs/dag/nope/clear-failed"), 404, "run-not-found")


class TestMark:
    def test_mark_success_unblocks_downstream_and_fences_the_worker(self, operator):
        run = operator.create_run(task("a"), task("b", "a"))
        worker = Worker(operator)
        old = worker.claim_one()
        old.report("running")
        resp = operator.post(f"/v1/task-instances/{ti_ids(run)['a']}/mark", json={"state": "success"})
        assert resp.status_code == 200, resp.text
        assert (resp.json()["state"], resp.json()["attempt_epoch"]) == ("success", 2)
        assert_stale(old.send("failed"))
        assert worker.claim_one().task_id == "b"
        attempts = operator.get(f"/v1/task-instances/{old.ti_id}/attempts").json()["items"]
        assert [(a["attempt_epoch"], a["state"]) for a in attempts] == [(1, "marked_success")]

    def test_mark_failed_fails_downstream_and_run(self, operator):
        run = operator.create_run(task("a", retries=3), task("b", "a"))
        worker = Worker(operator)
        old = worker.claim_one()
        operator.post(f"/v1/task-instances/{ti_ids(run)['a']}/mark", json={"state": "failed"})
        assert_stale(old.send("running"))
        assert states(operator) == {"a": "failed", "b": "upstream_failed"}
        assert operator.run()["state"] == "failed"

    def test_mark_success_shows_no_failure_and_mark_failed_records_one(self, operator):
        run = operator.create_run(task("a"), task("b"))
        worker = Worker(operator)
        for attempt in worker.claim():
            attempt.report("unexecutable", reason="node_lost")
        mark = {"a": "success", "b": "failed"}
        marked = {t: json_of(operator.post(f"/v1/task-instances/{ti_ids(run)[t]}/mark", json={"state": state}))
                  for t, state in mark.items()}
        assert {t: (ti["last_failure_kind"], ti["last_failure_reason"]) for t, ti in marked.items()} == {
            "a": (None, None), "b": ("app", "marked_failed")}
        assert [a["reason"] for a in operator.attempts(ti_ids(run)["a"])] == ["node_lost"]

    @pytest.mark.parametrize("body", [{"state": "running"}, {"state": "success", "note": "x"}, {}])
    def test_bad_mark_is_422_and_changes_nothing(self, operator, body):
        run = operator.create_run(task("a"))
        before = operator.run()
        resp = operator.post(f"/v1/task-instances/{ti_ids(run)['a']}/mark", json=body)
        assert_problem(resp, 422, "validation-error")
        assert operator.run() == before


class TestConcurrentCreation:
    def test_creating_one_run_at_once_makes_it_once(self, live_server):
        with live_server.client() as client:
            operator = Operator(client)
        body = {"dag_id": "dag", "run_id": "run", "tasks": [task("a")]}
        answers = race(live_server, [lambda http: operator.on(http).post("/v1/runs", json=body)] * 8)
        assert sorted(a.status_code for a in answers) == [201] + [409] * 7
        assert {a.json()["type"] for a in answers if a.status_code == 409} == {"run-exists"}
        with live_server.client() as client:
            assert len(operator.on(client).get("/v1/runs").json()["items"]) == 1
