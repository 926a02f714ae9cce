"""Outcome routing (contract 2.4, 2.9): application failures spend tries, infrastructure
faults are re-placed on their own budget, reschedules wait on the same try."""

from datetime import UTC, datetime, timedelta

from tests.support.api import Operator, Worker, task


def fields(ti: dict, *names: str) -> tuple:
    return tuple(ti[n] for n in names)


class TestInfraFault:
    def test_retries_zero_task_survives_three_faults_and_succeeds_on_try_one(self, operator):
        operator.create_run(task("a", retries=0, max_infra_attempts=3))
        worker = Worker(operator)
        for reason in ("node_lost", "evicted", "oom_killed"):
            attempt = worker.claim_one()
            attempt.report("running")
            assert attempt.report("unexecutable", reason=reason)["state"] == "scheduled"
        attempt = worker.claim_one()
        assert (attempt.try_number, attempt.epoch) == (1, 7)
        attempt.report("running")
        attempt.report("success")
        ti = operator.ti(attempt.ti_id)
        assert fields(ti, "state", "try_number", "infra_attempts", "last_failure_kind", "last_failure_reason") == (
            "success", 1, 3, "infra", "oom_killed")
        assert operator.run()["state"] == "success"

    def test_fault_past_the_budget_ends_in_infra_failed(self, operator):
        operator.create_run(task("a", max_infra_attempts=3))
        worker = Worker(operator)
        for _ in range(3):
            worker.claim_one().report("unexecutable", reason="node_lost")
        last = worker.claim_one()
        assert last.report("unexecutable", reason="evicted")["state"] == "infra_failed"
        ti = operator.ti(last.ti_id)
        assert fields(ti, "state", "try_number", "infra_attempts", "last_failure_kind", "last_failure_reason") == (
            "infra_failed", 1, 3, "infra", "evicted")
        assert worker.claim() == []
        assert operator.run()["state"] == "failed"

    def test_the_documented_budget_says_so(self, client):
        """Generated SDKs show this text: it must state the rule the tests above hold."""
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
        for schema in ("TaskCreate", "TaskInstancePublic"):
            description = schemas[schema]["properties"]["max_infra_attempts"]["description"]
            assert "re-placed while infra_attempts is below max_infra_attempts" in description
            assert "with 3, the fourth fault is terminal" in description

    def test_replacement_waits_out_the_back_off(self, make_client):
        client = make_client(infra_backoff_base_seconds=60)
        operator = Operator(client)
        operator.create_run(task("a"))
        worker = Worker(operator)
        attempt = worker.claim_one()
        faulted = datetime.now(UTC)
        attempt.report("unexecutable", reason="node_lost")
        assert worker.claim() == []
        eligible = datetime.fromisoformat(operator.ti(attempt.ti_id)["next_eligible_at"])
        assert faulted + timedelta(seconds=29) < eligible < faulted + timedelta(seconds=61)


class TestAppFailure:
    def test_failure_with_a_retry_left_moves_the_try(self, operator):
        operator.create_run(task("a", retries=1))
        worker = Worker(operator)
        first = worker.claim_one()
        first.report("running")
        assert first.report("failed", reason="exit 1")["state"] == "up_for_retry"
        ti = operator.ti(first.ti_id)
        assert fields(ti, "state", "try_number", "max_tries", "last_failure_kind", "last_failure_reason") == (
            "up_for_retry", 1, 1, "app", "exit 1")
        second = worker.claim_one()
        assert (second.try_number, second.epoch) == (2, 3)
        second.report("success")
        assert operator.ti(first.ti_id)["state"] == "success"

    def test_failure_of_the_last_try_fails_the_task_and_the_run(self, operator):
        operator.create_run(task("a", retries=1))
        worker = Worker(operator)
        worker.claim_one().report("failed")
        last = worker.claim_one()
        assert last.report("failed", reason="exit 2")["state"] == "failed"
        ti = operator.ti(last.ti_id)
        assert fields(ti, "state", "try_number", "last_failure_kind") == ("failed", 2, "app")
        assert worker.claim() == []
        assert operator.run()["state"] == "failed"

    def test_retries_zero_failure_is_final(self, operator):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        assert attempt.report("failed")["state"] == "failed"

    def test_retry_waits_for_the_retry_delay(self, operator):
        operator.create_run(task("a", retries=1, retry_delay=3600))
        worker = Worker(operator)
        worker.claim_one().report("failed")
        assert worker.claim() == []

    def test_infra_faults_of_an_earlier_try_do_not_spend_the_next_tries_budget(self, operator):
        operator.create_run(task("a", retries=1, max_infra_attempts=1))
        worker = Worker(operator)
        worker.claim_one().report("unexecutable", reason="node_lost")
        worker.claim_one().report("failed")
        second = worker.claim_one()
        assert second.report("unexecutable", reason="node_lost")["state"] == "scheduled"
        assert operator.ti(second.ti_id)["try_number"] == 2


class TestReschedule:
    def test_rescheduled_waits_on_the_same_try(self, operator):
        operator.create_run(task("sensor"))
        worker = Worker(operator)
        attempt = worker.claim_one()
        attempt.report("running")
        at = datetime.now(UTC) + timedelta(hours=1)
        assert attempt.report("rescheduled", reschedule_at=at.isoformat())["state"] == "up_for_reschedule"
        ti = operator.ti(attempt.ti_id)
        assert fields(ti, "state", "try_number", "infra_attempts") == ("up_for_reschedule", 1, 0)
        assert datetime.fromisoformat(ti["next_eligible_at"]) == at
        assert worker.claim() == []

    def test_due_reschedule_is_claimable_again_on_the_same_try(self, operator):
        operator.create_run(task("sensor"))
        worker = Worker(operator)
        attempt = worker.claim_one()
        attempt.report("running")
        attempt.report("rescheduled", reschedule_at=(datetime.now(UTC) - timedelta(seconds=1)).isoformat())
        again = worker.claim_one()
        assert (again.ti_id, again.try_number, again.epoch) == (attempt.ti_id, 1, 3)
        again.report("success")
        assert operator.ti(attempt.ti_id)["state"] == "success"
        assert [a["outcome_kind"] for a in operator.attempts(attempt.ti_id)] == ["rescheduled", "success"]


class TestNonIdempotent:
    def test_fault_before_running_is_replaced(self, operator):
        operator.create_run(task("a", idempotent=False))
        worker = Worker(operator)
        attempt = worker.claim_one()
        assert attempt.report("unexecutable", reason="evicted")["state"] == "scheduled"
        assert worker.claim_one().epoch == 3
        (record, _) = operator.attempts(attempt.ti_id)
        assert (record["outcome_kind"], record["user_code_started"]) == ("infra", False)

    def test_fault_after_running_ends_in_infra_failed(self, operator):
        operator.create_run(task("a", idempotent=False, max_infra_attempts=5))
        worker = Worker(operator)
        worker.claim_one().report("unexecutable", reason="evicted")
        attempt = worker.claim_one()
        attempt.report("running")
        assert attempt.report("unexecutable", reason="node_lost")["state"] == "infra_failed"
        ti = operator.ti(attempt.ti_id)
        assert fields(ti, "state", "try_number", "last_failure_kind", "last_failure_reason") == (
            "infra_failed", 1, "infra", "node_lost")
        records = operator.attempts(attempt.ti_id)
        assert [(r["attempt_epoch"], r["user_code_started"], r["reason"]) for r in records] == [
            (1, False, "evicted"), (3, True, "node_lost")]
        assert worker.claim() == []
