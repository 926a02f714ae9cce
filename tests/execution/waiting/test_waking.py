"""A waiting claim is answered as soon as work is ready, woken by the transaction that made it
ready (a run, an upstream's success, a clear, a release, a re-place, a time passing), or with
an empty list when its wait ends."""

from datetime import UTC, datetime, timedelta

import pytest

from app.main import create_app
from tests.support.api import Operator, Worker, assert_problem, json_of, task
from tests.support.claims import (
    Waiting,
    waiting_claims,
)
from tests.support.servers import LiveServer
from tests.support.settings import app_settings


class TestWaitingClaim:
    def test_a_waiting_claim_answers_an_empty_list_when_its_wait_ends(self, live_server, operator):
        assert Waiting(live_server, Worker(operator), wait=0.5).result() == []

    @pytest.mark.parametrize("wait", [-1, 30.5, "soon"])
    def test_a_wait_out_of_range_is_refused_and_claims_nothing(self, live_server, operator, wait):
        operator.create_run(task("t"))
        worker = Worker(operator)
        resp = operator.client.post("/v1/dispatch/claim", json={"limit": 1, "wait_seconds": wait},
                                    headers=worker.headers)
        assert_problem(resp, 422, "validation-error")
        assert operator.find_ti("t")["state"] == "scheduled"

    def test_ready_work_is_answered_without_waiting(self, live_server, operator):
        operator.create_run(task("t"))
        (item,) = Waiting(live_server, Worker(operator)).result()
        assert item["correlation"]["task_id"] == "t"

    def test_creating_a_run_wakes_a_waiting_claim(self, live_server, operator):
        (waiting,) = waiting_claims(live_server, [Worker(operator)])
        operator.create_run(task("t"))
        (item,) = waiting.result()
        assert (item["correlation"]["task_id"], item["correlation"]["attempt_epoch"]) == ("t", 1)

    def test_an_upstream_success_wakes_a_waiting_claim_for_its_downstream(self, live_server, operator):
        operator.create_run(task("a"), task("b", "a"))
        upstream = Worker(operator, "worker-a").claim_one()
        (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
        upstream.report("running")
        upstream.report("success")
        (item,) = waiting.result()
        assert item["correlation"]["task_id"] == "b"

    def test_a_clear_wakes_a_waiting_claim(self, live_server, operator):
        ti_id = operator.create_run(task("t"))["task_instances"][0]["ti_id"]
        done = Worker(operator, "worker-a").claim_one()
        done.report("running")
        done.report("success")
        (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
        json_of(operator.post(f"/v1/task-instances/{ti_id}/clear"))
        (item,) = waiting.result()
        assert (item["correlation"]["ti_id"], item["correlation"]["try_number"]) == (ti_id, 2)

    def test_clearing_the_failed_of_a_run_wakes_a_waiting_claim(self, live_server, operator):
        operator.create_run(task("t"))
        failed = Worker(operator, "worker-a").claim_one()
        failed.report("running")
        failed.report("failed")
        (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
        json_of(operator.post("/v1/runs/dag/run/clear-failed"))
        (item,) = waiting.result()
        assert item["correlation"]["try_number"] == 2

    def test_a_release_wakes_a_waiting_claim(self, live_server, operator):
        operator.create_run(task("t"))
        handed_back = Worker(operator, "worker-a").claim_one()
        (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
        assert handed_back.release().status_code == 200
        (item,) = waiting.result()
        assert item["correlation"]["attempt_epoch"] == 3  # claim, requeue, claim

    def test_an_infra_re_place_wakes_a_waiting_claim(self, live_server, operator):
        operator.create_run(task("t"))
        lost = Worker(operator, "worker-a").claim_one()
        (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
        lost.report("unexecutable", reason="dispatch_failed")  # back-off 0 in the tests: ready at once
        (item,) = waiting.result()
        assert item["correlation"]["attempt_epoch"] == 3

    def test_a_retry_delay_passing_wakes_a_waiting_claim(self, live_server, operator):
        operator.create_run(task("t", retries=1, retry_delay=1))
        failed = Worker(operator, "worker-a").claim_one()
        failed.report("running")
        (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
        failed.report("failed")  # up_for_retry: claimable in a second, told by nothing but the timer
        (item,) = waiting.result()
        assert item["correlation"]["try_number"] == 2

    def test_a_reschedule_time_passing_wakes_a_waiting_claim(self, live_server, operator):
        operator.create_run(task("sensor"))
        poke = Worker(operator, "worker-a").claim_one()
        poke.report("running")
        (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
        poke.report("rescheduled", reschedule_at=(datetime.now(UTC) + timedelta(seconds=1)).isoformat())
        (item,) = waiting.result()
        assert (item["correlation"]["task_id"], item["correlation"]["try_number"]) == ("sensor", 1)

    def test_a_time_already_set_when_the_server_starts_wakes_a_waiting_claim(self, db_url, engine):
        with LiveServer(create_app(app_settings(db_url))) as first:
            operator = Operator(first.client())
            operator.create_run(task("t", retries=1, retry_delay=3))
            failed = Worker(operator, "worker-a").claim_one()
            failed.report("running")
            failed.report("failed")
        with LiveServer(create_app(app_settings(db_url))) as second:  # learns the time from the database
            (waiting,) = waiting_claims(second, [Worker(Operator(second.client()), "worker-b")])
            (item,) = waiting.result()
        assert item["correlation"]["try_number"] == 2
