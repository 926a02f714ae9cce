"""The operator rails cancel (a run) and re-place now (a task instance), contract 12 and 2:
each fences off what is in flight as clear and mark do."""

import httpx

from tests.support.api import Attempt, Operator, Worker, assert_problem, assert_stale, json_of, task, ti_ids
from tests.support.concurrency import race


def by_task(run: dict) -> dict[str, dict]:
    return {ti["task_id"]: ti for ti in run["task_instances"]}


class TestCancel:
    def test_in_flight_ends_failed_the_rest_skipped_and_the_run_ends(self, operator):
        run = operator.create_run(task("running"), task("queued"), task("done"), task("waiting", "running"),
                                  task("retrying", retries=2))
        worker = Worker(operator)
        claimed = {a.task_id: a for a in worker.claim()}
        claimed["running"].report("running")
        claimed["done"].report("success")
        claimed["retrying"].report("failed")
        resp = operator.post("/v1/runs/dag/run/cancel")
        assert resp.status_code == 200, resp.text
        cancelled = resp.json()
        assert cancelled["state"] == "failed" and cancelled["ended_at"] is not None
        tis = by_task(cancelled)
        assert {t: ti["state"] for t, ti in tis.items()} == {
            "running": "failed", "queued": "failed", "done": "success", "waiting": "skipped", "retrying": "skipped"}
        assert {t: tis[t]["last_failure_reason"] for t in ("running", "queued")} == {
            "running": "cancelled", "queued": "cancelled"}
        for name in ("running", "queued"):  # every in-flight attempt is told to terminate at its next call
            assert assert_stale(claimed[name].heartbeat())["should_terminate"] is True
            assert_stale(claimed[name].send("success"))
            attempts = operator.attempts(ti_ids(run)[name])
            assert [(a["attempt_epoch"], a["state"]) for a in attempts] == [(1, "cancelled")]
        assert worker.claim() == []

    def test_a_finished_run_is_refused_409_run_finished(self, operator):
        operator.create_run(task("a"))
        Worker(operator).claim_one().report("success")
        problem = assert_problem(operator.post("/v1/runs/dag/run/cancel"), 409, "run-finished")
        assert problem["state"] == "success"
        assert operator.run()["state"] == "success"

    def test_cancelled_twice_the_second_is_refused_and_changes_nothing(self, operator):
        operator.create_run(task("a"))
        first = json_of(operator.post("/v1/runs/dag/run/cancel"))
        assert_problem(operator.post("/v1/runs/dag/run/cancel"), 409, "run-finished")
        assert operator.run() == first

    def test_clearing_the_failed_tasks_resumes_a_cancelled_run(self, operator):
        operator.create_run(task("a"), task("b", "a"))
        worker = Worker(operator)
        worker.claim_one()
        operator.post("/v1/runs/dag/run/cancel")
        resumed = json_of(operator.post("/v1/runs/dag/run/clear-failed"))
        assert resumed["state"] == "running"
        assert {t: ti["state"] for t, ti in by_task(resumed).items()} == {"a": "scheduled", "b": "none"}
        worker.claim_one().report("success")
        worker.claim_one().report("success")
        assert operator.run()["state"] == "success"

    def test_unknown_run_is_404(self, operator):
        assert_problem(operator.post("/v1/runs/dag/nope/cancel"), 404, "run-not-found")

    def test_cancel_racing_claims_leaves_nothing_in_flight(self, live_server, is_postgres):
        """Claims take no run lock: whatever a claimer takes while the run is cancelled is
        fenced off too, and every claimed attempt is told to terminate."""
        size, claimers = (60, 6) if is_postgres else (12, 2)
        with live_server.client() as client:
            operator = Operator(client)
            json_of(operator.patch("/v1/pools/default_pool", json={"slots": size}))
            operator.create_run(*(task(f"t{i:02}") for i in range(size)))
            workers = [Worker(operator, f"worker-{n}") for n in range(claimers)]

        def claimer(worker: Worker):
            def claim(http: httpx.Client) -> list[dict]:
                got: list[dict] = []
                while (items := json_of(http.post("/v1/dispatch/claim", json={"limit": 2},
                                                  headers=worker.headers))["items"]):
                    got += items
                return got
            return claim

        *claimed, cancelled = race(live_server, [claimer(w) for w in workers]
                                   + [lambda http: operator.on(http).post("/v1/runs/dag/run/cancel")])
        assert cancelled.status_code == 200, cancelled.text
        with live_server.client() as client:
            final = Operator(client).run()
            assert final["state"] == "failed"
            assert {ti["state"] for ti in final["task_instances"]} <= {"failed", "skipped"}
            for item in (i for got in claimed for i in got):
                assert_stale(Attempt(client, item).heartbeat())


class TestReplace:
    def test_an_attempt_in_flight_is_ended_and_the_try_placed_again_now(self, operator):
        run = operator.create_run(task("a", max_infra_attempts=2))
        worker = Worker(operator)
        old = worker.claim_one()
        old.report("running")
        resp = operator.post(f"/v1/task-instances/{old.ti_id}/replace")
        assert resp.status_code == 200, resp.text
        ti = resp.json()
        assert (ti["state"], ti["try_number"], ti["attempt_epoch"], ti["infra_attempts"], ti["last_failure_kind"],
                ti["last_failure_reason"]) == ("scheduled", 1, 2, 1, "infra", "operator_replaced")
        assert assert_stale(old.heartbeat())["should_terminate"] is True
        new = worker.claim_one()  # at once: no back-off
        assert (new.try_number, new.epoch) == (1, 3)
        attempts = operator.attempts(ti_ids(run)["a"])
        assert [(a["attempt_epoch"], a["state"], a["outcome_kind"], a["reason"]) for a in attempts][0] == (
            1, "unexecutable", "infra", "operator_replaced")

    def test_with_the_infra_budget_spent_it_ends_infra_failed(self, operator):
        operator.create_run(task("a", max_infra_attempts=0))
        attempt = Worker(operator).claim_one()
        ti = json_of(operator.post(f"/v1/task-instances/{attempt.ti_id}/replace"))
        assert (ti["state"], ti["try_number"]) == ("infra_failed", 1)
        assert operator.run()["state"] == "failed"

    def test_nothing_in_flight_is_refused_409_and_changes_nothing(self, operator):
        run = operator.create_run(task("a"))
        before = operator.run()
        problem = assert_problem(operator.post(f"/v1/task-instances/{ti_ids(run)['a']}/replace"), 409,
                                 "task-instance-not-in-flight")
        assert problem["state"] == "scheduled"
        assert operator.run() == before

    def test_unknown_task_instance_is_404(self, operator):
        resp = operator.post("/v1/task-instances/00000000-0000-0000-0000-000000000000/replace")
        assert_problem(resp, 404, "task-instance-not-found")


class TestDocumented:
    def test_the_refusals_are_typed_in_the_openapi_document(self, client):
        paths = client.get("/openapi.json").json()["paths"]
        for path in ("/v1/runs/{dag_id}/{run_id}/cancel", "/v1/task-instances/{ti_id}/replace"):
            refusal = paths[path]["post"]["responses"]["409"]["content"]["application/problem+json"]["schema"]
            assert refusal == {"$ref": "#/components/schemas/RailRefusal"}
