"""The worker claims by waiting on the server, not by polling."""

from tests.support.agents import python_task
from tests.support.api import Operator
from tests.support.claims import hub
from tests.support.waiting import wait_until


def waiting_claims(server) -> int:
    return hub(server).waiting


class TestWaitingClaims:
    def test_an_idle_worker_waits_on_the_server_and_takes_work_as_it_is_created(self, server, workers):
        worker = workers(server, "etl-a", "--claim-wait", "30")
        wait_until(lambda: waiting_claims(server) == 1, "the idle worker's claim to wait")
        operator = Operator(server.client())
        operator.create_run(python_task("t", "print('hello')"))
        wait_until(lambda: operator.find_ti("t")["state"] == "success", "the task to succeed")
        assert worker.stop() == 0

    def test_a_stop_signal_ends_the_waiting_claim_and_nothing_is_claimed_for_it(self, server, workers):
        worker = workers(server, "etl-a", "--claim-wait", "30")
        wait_until(lambda: waiting_claims(server) == 1, "the idle worker's claim to wait")
        assert worker.stop(timeout=20) == 0  # well before the claim's 30 s were over
        operator = Operator(server.client())
        operator.create_run(python_task("t", "print('hello')"))
        wait_until(server.idle, "every request to end")
        assert operator.find_ti("t")["state"] == "scheduled"

    def test_a_claim_wait_beyond_the_server_limit_is_refused(self, server, workers):
        worker = workers(server, "etl-a", "--claim-wait", "31")
        assert worker.proc.wait(timeout=30) == 2
        assert "--claim-wait" in worker.output
        assert "refused by the server: Input should be less than or equal to 30" in worker.output
