"""A waiting claim whose client has gone claims nothing: the wake passes to a claimer still
connected, or the task stays scheduled."""

import socket

import pytest

from tests.support.api import Worker, task
from tests.support.claims import (
    claim_transactions,
    hub,
    raw_claim,
    waiting_claims,
)
from tests.support.concurrency import wait_for_lock_waits
from tests.support.waiting import wait_until


class TestGoneClient:
    def test_a_waiter_whose_client_has_gone_claims_nothing(self, live_server, operator):
        """The client of the oldest waiting claim closes its connection; a run is then created.
        The gone waiter is woken first, claims nothing and passes the wake on: the task goes to
        the claimer still connected, on the first claim it ever had."""
        gone_worker, live_worker = Worker(operator, "worker-gone"), Worker(operator, "worker-live")
        with socket.create_connection(("127.0.0.1", live_server.port)) as raw:
            raw.sendall(raw_claim(gone_worker, b'{"limit": 1, "wait_seconds": 30}'))
            wait_until(lambda: hub(live_server).waiting == 1, "the claim to wait")
        (still_there,) = waiting_claims(live_server, [live_worker])  # the older one is still queued
        ti_id = operator.create_run(task("t"))["task_instances"][0]["ti_id"]
        (item,) = still_there.result()
        assert item["correlation"]["ti_id"] == ti_id
        (attempt,) = operator.attempts(ti_id)
        assert (attempt["attempt_epoch"], attempt["execution_id"]) == (1, live_worker.execution_id)

    @pytest.mark.postgres_only("a claim on SQLite takes no row lock to pause it at")
    def test_a_client_gone_while_its_claim_is_made_with_others_is_handed_nothing(self, live_server, operator,
                                                                                   engine):
        """Two waiters woken together claim in one transaction, which a test transaction
        holding default_pool's row pauses; one client leaves meanwhile. The transaction is
        made again without it: the other gets a task, and the gone one's stays scheduled."""
        # A listener that starts listening only after the claims wait resynchronises, waking the
        # oldest of them on its own: the two would then not be woken, and claim, together.
        wait_until(lambda: hub(live_server).hearing, "the server to hear every event")
        gone_worker, live_worker = Worker(operator, "worker-gone"), Worker(operator, "worker-live")
        with socket.create_connection(("127.0.0.1", live_server.port)) as raw:
            raw.sendall(raw_claim(gone_worker, b'{"limit": 1, "wait_seconds": 30}'))
            wait_until(lambda: hub(live_server).waiting == 1, "the claim to wait")
            (still_there,) = waiting_claims(live_server, [live_worker])
            with engine.connect() as pause, claim_transactions(live_server) as ended:
                pause.exec_driver_sql("SELECT 1 FROM pools WHERE name = 'default_pool' FOR NO KEY UPDATE")
                operator.create_run(task("t0"), task("t1"))
                wait_for_lock_waits(engine, 1)  # the woken waiters' transaction waits for the pool
                connections = len(live_server.server.server_state.connections)
                raw.close()
                wait_until(lambda: len(live_server.server.server_state.connections) < connections,
                           "the server to see the client go")
                pause.rollback()
                (item,) = still_there.result()  # after the transaction that claimed it committed
            assert (ended["rollback"], ended["commit"]) == ([2], [1])
        others = [ti for ti in operator.run()["task_instances"] if ti["ti_id"] != item["correlation"]["ti_id"]]
        assert [(ti["state"], operator.attempts(ti["ti_id"])) for ti in others] == [("scheduled", [])]
        (attempt,) = operator.attempts(item["correlation"]["ti_id"])
        assert attempt["execution_id"] == live_worker.execution_id

    def test_with_no_other_claimer_the_task_stays_scheduled(self, live_server, operator):
        worker = Worker(operator)
        with socket.create_connection(("127.0.0.1", live_server.port)) as raw:
            raw.sendall(raw_claim(worker, b'{"wait_seconds": 30}'))
            wait_until(lambda: hub(live_server).waiting == 1, "the claim to wait")
        operator.create_run(task("t"))
        # The woken waiter ends its request without claiming: wait for the server's request tasks to end.
        wait_until(live_server.idle, "the gone claim's request to end")
        assert operator.find_ti("t")["state"] == "scheduled"
        assert Worker(operator, "worker-2").claim_one().epoch == 1
