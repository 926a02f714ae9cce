"""Substrate observations (contract 2.7): recorded on their own attempt; only an explicit
outcome settles, and only the attempt it names."""

from tests.support.api import Worker, assert_problem, assert_stale, superseded, task


def observe(operator, attempt, **fields):
    body = {"ti_id": attempt.ti_id, "try_number": attempt.try_number, "attempt_epoch": attempt.epoch,
            "phase": "Running", **fields}
    return operator.post("/v1/observations", json=body)


class TestObserve:
    def test_a_phase_alone_is_recorded_and_settles_nothing(self, operator):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        attempt.report("running")
        resp = observe(operator, attempt, phase="Failed", reason="Error")
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"recorded": True, "settled": False, "state": "running"}
        (record,) = operator.attempts(attempt.ti_id)
        assert (record["observed_phase"], record["observed_reason"], record["outcome_kind"]) == (
            "Failed", "Error", None)

    def test_an_outcome_of_the_live_attempt_settles_it(self, operator):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        attempt.report("running")
        resp = observe(operator, attempt, phase="Failed", reason="evicted", outcome="unexecutable")
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"recorded": True, "settled": True, "state": "scheduled"}
        ti = operator.ti(attempt.ti_id)
        assert (ti["try_number"], ti["attempt_epoch"], ti["last_failure_reason"]) == (1, 2, "evicted")
        assert_stale(attempt.heartbeat())

    def test_a_stale_terminal_observation_never_settles_the_next_epoch(self, operator):
        old, new = superseded(operator)
        before_ti, before_attempts = operator.ti(new.ti_id), operator.attempts(new.ti_id)
        for outcome in ("success", "failed"):
            assert_stale(observe(operator, old, phase="Succeeded" if outcome == "success" else "Failed",
                                 outcome=outcome))
        assert operator.ti(new.ti_id) == before_ti
        assert operator.attempts(new.ti_id) == before_attempts
        new.report("success")

    def test_a_stale_terminal_observation_never_settles_the_very_next_epoch(self, operator):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        attempt.release()
        before = operator.ti(attempt.ti_id)
        assert (before["state"], before["attempt_epoch"]) == ("scheduled", 2)
        assert_stale(observe(operator, attempt, phase="Succeeded", outcome="success"))
        assert operator.ti(attempt.ti_id) == before

    def test_an_unexecutable_outcome_needs_an_infra_reason(self, operator):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        before = operator.ti(attempt.ti_id)
        assert_problem(observe(operator, attempt, outcome="unexecutable", reason="Error"), 422,
                       "validation-error")
        assert operator.ti(attempt.ti_id) == before

    def test_unknown_task_instance_is_404(self, operator):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        attempt.ti_id = "00000000-0000-0000-0000-000000000000"
        assert_problem(observe(operator, attempt), 404, "task-instance-not-found")


class TestListAttempts:
    def test_every_epoch_is_listed_with_its_outcome(self, operator):
        operator.create_run(task("a", retries=1))
        first_worker = Worker(operator)
        lost = first_worker.claim_one()
        lost.report("running")
        second_worker = first_worker.replacement()
        operator.reap()
        released = second_worker.claim_one()
        released.release()
        failed = second_worker.claim_one()
        failed.report("running")
        failed.report("failed", reason="exit 1")
        final = second_worker.claim_one()
        final.report("running")
        final.report("success")
        records = operator.attempts(lost.ti_id)
        assert [(r["try_number"], r["attempt_epoch"], r["execution_id"], r["state"], r["outcome_kind"], r["reason"],
                 r["user_code_started"]) for r in records] == [
            (1, 1, first_worker.execution_id, "unexecutable", "infra", "worker_lost", True),
            (1, 3, second_worker.execution_id, "released", None, None, False),
            (1, 5, second_worker.execution_id, "failed", "app", "exit 1", True),
            (2, 7, second_worker.execution_id, "success", "success", None, True),
        ]
        assert all(r["ended_at"] is not None for r in records)
        assert all(r["started_at"] is not None for r in records if r["user_code_started"])

    def test_unknown_task_instance_is_404(self, operator):
        resp = operator.get("/v1/task-instances/00000000-0000-0000-0000-000000000000/attempts")
        assert_problem(resp, 404, "task-instance-not-found")
