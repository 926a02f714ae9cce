"""The report fence (contract 2.5): agent writes of a superseded attempt change nothing."""

from tests.agents import (
    Worker,
    assert_problem,
    assert_stale,
    bearer,
    create_run,
    read_attempts,
    read_ti,
    reap,
    superseded,
    task,
    ti_ids,
)


class TestReport:
    def test_running_then_success_settles_the_live_attempt(self, client, operator):
        create_run(client, operator, task("a"))
        attempt = Worker(client, operator).claim_one()
        assert attempt.report("running")["state"] == "running"
        answer = attempt.report("success")
        assert answer == {"ti_id": attempt.ti_id, "state": "success", "try_number": 1, "attempt_epoch": 1,
                          "should_terminate": False}
        assert read_ti(client, operator, attempt.ti_id)["state"] == "success"

    def test_superseded_outcome_is_stale_and_the_replacement_untouched(self, client, operator):
        old, new = superseded(client, operator)
        before_ti, before_attempts = read_ti(client, operator, new.ti_id), read_attempts(client, operator, new.ti_id)
        for outcome in ({"state": "success"}, {"state": "failed", "reason": "exit 1"},
                        {"state": "unexecutable", "reason": "oom_killed"},
                        {"state": "rescheduled", "reschedule_at": "2030-01-01T00:00:00Z"}):
            problem = assert_stale(old.send(**outcome))
            assert (problem["try_number"], problem["attempt_epoch"], problem["state"]) == (1, 3, "running")
            assert read_ti(client, operator, new.ti_id) == before_ti, outcome
            assert read_attempts(client, operator, new.ti_id) == before_attempts, outcome
        assert new.report("success")["state"] == "success"

    def test_superseded_running_report_is_stale_and_the_replacement_untouched(self, client, operator):
        create_run(client, operator, task("a"))
        old_worker = Worker(client, operator)
        old = old_worker.claim_one()  # lost before it said running
        new_worker = old_worker.replacement()
        assert reap(client, operator) == {"worker_lost": 1}
        new = new_worker.claim_one()
        before_ti, before_attempts = read_ti(client, operator, new.ti_id), read_attempts(client, operator, new.ti_id)
        assert_stale(old.send("running"))
        after = read_ti(client, operator, new.ti_id)
        assert after == before_ti
        assert (after["state"], after["attempt_epoch"], after["started_at"]) == ("queued", 3, None)
        assert read_attempts(client, operator, new.ti_id) == before_attempts
        assert not before_attempts[-1]["user_code_started"]

    def test_repeated_outcome_of_the_same_attempt_answers_as_before(self, client, operator):
        create_run(client, operator, task("a", retries=1))
        attempt = Worker(client, operator).claim_one()
        first = attempt.report("failed", reason="exit 3")
        assert attempt.report("failed", reason="exit 3") == first
        ti = read_ti(client, operator, attempt.ti_id)
        assert (ti["state"], ti["try_number"]) == ("up_for_retry", 1)

    def test_a_different_outcome_after_settling_is_stale(self, client, operator):
        create_run(client, operator, task("a"))
        attempt = Worker(client, operator).claim_one()
        attempt.report("success")
        assert_stale(attempt.send("failed", reason="exit 1"))
        assert_stale(attempt.send("running"))
        assert read_ti(client, operator, attempt.ti_id)["state"] == "success"

    def test_bad_report_is_422_and_changes_nothing(self, client, operator):
        create_run(client, operator, task("a"))
        attempt = Worker(client, operator).claim_one()
        attempt.report("running")
        before = read_ti(client, operator, attempt.ti_id)
        for body in ({"state": "unexecutable"}, {"state": "unexecutable", "reason": "exit 1"}, {"state": "rescheduled"},
                     {"state": "rescheduled", "reschedule_at": "2030-01-01T00:00:00"},  # no timezone
                     {"state": "rescheduled", "reschedule_at": "tomorrow"},
                     {"state": "success", "reschedule_at": "2030-01-01T00:00:00Z"},
                     {"state": "finished"}, {"state": "success", "exit_code": 0}, {}):
            resp = client.post("/v1/attempts/report", json=body, headers=bearer(attempt.token))
            assert resp.status_code == 422, body
            assert_problem(resp, 422, "validation-error")
        assert read_ti(client, operator, attempt.ti_id) == before


class TestHeartbeat:
    def test_heartbeat_stamps_the_live_attempt(self, client, operator):
        create_run(client, operator, task("a"))
        attempt = Worker(client, operator).claim_one()
        attempt.report("running")
        started = read_ti(client, operator, attempt.ti_id)["last_heartbeat_at"]
        resp = attempt.heartbeat()
        assert resp.status_code == 200, resp.text
        assert resp.json()["should_terminate"] is False
        assert read_ti(client, operator, attempt.ti_id)["last_heartbeat_at"] > started

    def test_superseded_heartbeat_is_stale_and_moves_nothing(self, client, operator):
        old, new = superseded(client, operator)
        before = read_ti(client, operator, new.ti_id)
        assert_stale(old.heartbeat())
        assert read_ti(client, operator, new.ti_id) == before


class TestLive:
    def test_live_attempt_is_confirmed(self, client, operator):
        create_run(client, operator, task("a"))
        attempt = Worker(client, operator).claim_one()
        resp = attempt.live()
        assert resp.status_code == 200
        assert resp.json()["should_terminate"] is False

    def test_superseded_attempt_is_told_to_terminate(self, client, operator):
        old, _ = superseded(client, operator)
        assert_stale(old.live())

    def test_finished_attempt_is_told_to_terminate(self, client, operator):
        create_run(client, operator, task("a"))
        attempt = Worker(client, operator).claim_one()
        attempt.report("success")
        assert_stale(attempt.live())


class TestRelease:
    def test_release_before_running_requeues_on_a_new_epoch_for_free(self, client, operator):
        run = create_run(client, operator, task("a"))
        attempt = Worker(client, operator).claim_one()
        resp = attempt.release()
        assert resp.status_code == 200, resp.text
        ti = read_ti(client, operator, ti_ids(run)["a"])
        assert (ti["state"], ti["try_number"], ti["attempt_epoch"], ti["infra_attempts"], ti["execution_id"]) == (
            "scheduled", 1, 2, 0, None)
        assert_stale(attempt.send("running"))

    def test_a_started_attempt_cannot_be_released_and_keeps_running(self, client, operator):
        run = create_run(client, operator, task("a"))
        attempt = Worker(client, operator).claim_one()
        attempt.report("running")
        before = read_ti(client, operator, ti_ids(run)["a"])
        resp = attempt.release()
        assert resp.status_code == 409
        assert resp.json()["type"] == "attempt-started" and resp.json()["should_terminate"] is False
        assert read_ti(client, operator, ti_ids(run)["a"]) == before

    def test_superseded_release_is_stale(self, client, operator):
        old, new = superseded(client, operator)
        before = read_ti(client, operator, new.ti_id)
        assert_stale(old.release())
        assert read_ti(client, operator, new.ti_id) == before
