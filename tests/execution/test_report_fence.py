"""The report fence (contract 2.5): agent writes of a superseded attempt change nothing."""

from tests.support.api import Worker, assert_problem, assert_stale, superseded, task, ti_ids


class TestReport:
    def test_running_then_success_settles_the_live_attempt(self, operator):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        assert attempt.report("running")["state"] == "running"
        answer = attempt.report("success")
        assert answer == {"ti_id": attempt.ti_id, "state": "success", "try_number": 1, "attempt_epoch": 1,
                          "should_terminate": False}
        assert operator.ti(attempt.ti_id)["state"] == "success"

    def test_the_attempt_record_follows_claim_running_and_success(self, operator):
        """Contract 2.8: the record of the epoch names its execution, its outcome and the
        reason given, and its claim, start and end in that order (PostgreSQL writes them in
        the claim's, the start's and the success's own statements)."""
        operator.create_run(task("a"))
        worker = Worker(operator)
        attempt = worker.claim_one()
        (claimed,) = operator.attempts(attempt.ti_id)
        assert (claimed["state"], claimed["execution_id"], claimed["user_code_started"], claimed["started_at"],
                claimed["ended_at"]) == ("queued", worker.execution_id, False, None, None)
        attempt.report("running")
        (started,) = operator.attempts(attempt.ti_id)
        assert (started["state"], started["user_code_started"], started["ended_at"]) == ("running", True, None)
        attempt.report("success", reason="all rows loaded")
        (record,) = operator.attempts(attempt.ti_id)
        assert (record["attempt_epoch"], record["execution_id"], record["state"], record["outcome_kind"],
                record["reason"], record["user_code_started"]) == (
            1, worker.execution_id, "success", "success", "all rows loaded", True)
        assert record["claimed_at"] == claimed["claimed_at"] <= record["started_at"] == started["started_at"] \
            <= record["ended_at"]

    def test_superseded_outcome_is_stale_and_the_replacement_untouched(self, operator):
        old, new = superseded(operator)
        before_ti, before_attempts = operator.ti(new.ti_id), operator.attempts(new.ti_id)
        for outcome in ({"state": "success"}, {"state": "failed", "reason": "exit 1"},
                        {"state": "unexecutable", "reason": "oom_killed"},
                        {"state": "rescheduled", "reschedule_at": "2030-01-01T00:00:00Z"}):
            problem = assert_stale(old.send(**outcome))
            assert (problem["try_number"], problem["attempt_epoch"], problem["state"]) == (1, 3, "running")
            assert operator.ti(new.ti_id) == before_ti, outcome
            assert operator.attempts(new.ti_id) == before_attempts, outcome
        assert new.report("success")["state"] == "success"

    def test_superseded_running_report_is_stale_and_the_replacement_untouched(self, operator):
        operator.create_run(task("a"))
        old_worker = Worker(operator)
        old = old_worker.claim_one()  # lost before it said running
        new_worker = old_worker.replacement()
        assert operator.reap() == {"worker_lost": 1}
        new = new_worker.claim_one()
        before_ti, before_attempts = operator.ti(new.ti_id), operator.attempts(new.ti_id)
        assert_stale(old.send("running"))
        after = operator.ti(new.ti_id)
        assert after == before_ti
        assert (after["state"], after["attempt_epoch"], after["started_at"]) == ("queued", 3, None)
        assert operator.attempts(new.ti_id) == before_attempts
        assert not before_attempts[-1]["user_code_started"]

    def test_repeated_outcome_of_the_same_attempt_answers_as_before(self, operator):
        operator.create_run(task("a", retries=1))
        attempt = Worker(operator).claim_one()
        first = attempt.report("failed", reason="exit 3")
        assert attempt.report("failed", reason="exit 3") == first
        ti = operator.ti(attempt.ti_id)
        assert (ti["state"], ti["try_number"]) == ("up_for_retry", 1)

    def test_a_different_outcome_after_settling_is_stale(self, operator):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        attempt.report("success")
        assert_stale(attempt.send("failed", reason="exit 1"))
        assert_stale(attempt.send("running"))
        assert operator.ti(attempt.ti_id)["state"] == "success"

    def test_bad_report_is_422_and_changes_nothing(self, client, operator):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        attempt.report("running")
        before = operator.ti(attempt.ti_id)
        for body in ({"state": "unexecutable"}, {"state": "unexecutable", "reason": "exit 1"}, {"state": "rescheduled"},
                     {"state": "rescheduled", "reschedule_at": "2030-01-01T00:00:00"},  # no timezone
                     {"state": "rescheduled", "reschedule_at": "tomorrow"},
                     {"state": "success", "reschedule_at": "2030-01-01T00:00:00Z"},
                     {"state": "finished"}, {"state": "success", "exit_code": 0}, {}):
            resp = client.post("/v1/attempts/report", json=body, headers=attempt.headers)
            assert resp.status_code == 422, body
            assert_problem(resp, 422, "validation-error")
        assert operator.ti(attempt.ti_id) == before


class TestHeartbeat:
    def test_heartbeat_stamps_the_live_attempt(self, operator):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        attempt.report("running")
        started = operator.ti(attempt.ti_id)["last_heartbeat_at"]
        resp = attempt.heartbeat()
        assert resp.status_code == 200, resp.text
        assert resp.json()["should_terminate"] is False
        assert operator.ti(attempt.ti_id)["last_heartbeat_at"] > started

    def test_superseded_heartbeat_is_stale_and_moves_nothing(self, operator):
        old, new = superseded(operator)
        before = operator.ti(new.ti_id)
        assert_stale(old.heartbeat())
        assert operator.ti(new.ti_id) == before


class TestLive:
    def test_live_attempt_is_confirmed(self, operator):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        resp = attempt.live()
        assert resp.status_code == 200
        assert resp.json()["should_terminate"] is False

    def test_superseded_attempt_is_told_to_terminate(self, operator):
        old, _ = superseded(operator)
        assert_stale(old.live())

    def test_finished_attempt_is_told_to_terminate(self, operator):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        attempt.report("success")
        assert_stale(attempt.live())


class TestRelease:
    def test_release_before_running_requeues_on_a_new_epoch_for_free(self, operator):
        run = operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        resp = attempt.release()
        assert resp.status_code == 200, resp.text
        ti = operator.ti(ti_ids(run)["a"])
        assert (ti["state"], ti["try_number"], ti["attempt_epoch"], ti["infra_attempts"], ti["execution_id"]) == (
            "scheduled", 1, 2, 0, None)
        assert_stale(attempt.send("running"))

    def test_a_started_attempt_cannot_be_released_and_keeps_running(self, operator):
        run = operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        attempt.report("running")
        before = operator.ti(ti_ids(run)["a"])
        resp = attempt.release()
        assert resp.status_code == 409
        assert resp.json()["type"] == "attempt-started" and resp.json()["should_terminate"] is False
        assert operator.ti(ti_ids(run)["a"]) == before

    def test_superseded_release_is_stale(self, operator):
        old, new = superseded(operator)
        before = operator.ti(new.ti_id)
        assert_stale(old.release())
        assert operator.ti(new.ti_id) == before
