"""Who a wake reaches: one task wakes one of many waiters, a claim that took a full batch passes
the wake on, and waiters woken by one event claim together in one transaction."""


import pytest

from tests.support.api import Worker, task
from tests.support.claims import (
    Waiting,
    asleep,
    claim_transactions,
    hears,
    hub,
    waiting_claims,
)
from tests.support.waiting import wait_until


class TestFairness:
    def test_many_waiters_and_one_task_one_gets_it_and_the_others_are_not_woken(self, live_server, operator):
        """The five others stay asleep in the hub (the same waiters, never woken) until there is
        work for them too."""
        hears(live_server)
        waiting = waiting_claims(live_server, [Worker(operator, f"worker-{n}") for n in range(6)])
        waiters = asleep(live_server)
        operator.create_run(task("t"))
        (taker,) = wait_until(lambda: [w for w in waiting if w.future.done()], "a waiter to take the task")
        assert [item["correlation"]["task_id"] for item in taker.result()] == ["t"]
        others = [w for w in waiting if w is not taker]
        assert not any(w.future.done() for w in others)
        assert len(asleep(live_server)) == 5 and set(asleep(live_server)) < set(waiters)
        operator.create_run(*(task(f"u{n}") for n in range(5)), run_id="more")
        answers = [w.result() for w in others]
        assert sorted(item["correlation"]["task_id"] for items in answers for item in items) == [
            f"u{n}" for n in range(5)]

    def test_a_woken_claim_that_takes_a_full_batch_passes_the_wake_on(self, live_server, operator):
        waiting = waiting_claims(live_server, [Worker(operator, f"worker-{n}") for n in range(3)], limit=2)
        operator.create_run(*(task(f"t{n}") for n in range(5)))
        assert sorted(len(w.result()) for w in waiting) == [1, 2, 2]


    @pytest.mark.usefixtures("no_promotion_net")
    def test_waiters_woken_by_one_event_claim_together_in_one_transaction(self, live_server, operator):
        """Each of the four waiters gets one of the run's four tasks, and the four claims are
        one transaction's (ClaimTurns.join): the pools are locked once, not once per waiter; and
        once one waiter's look found the work, the others do not look."""
        waiting = waiting_claims(live_server, [Worker(operator, f"worker-{n}") for n in range(4)])
        with claim_transactions(live_server) as ended:
            operator.create_run(*(task(f"t{n}") for n in range(4)))
            answers = [w.result() for w in waiting]
        assert sorted(item["correlation"]["task_id"] for items in answers for item in items) == ["t0", "t1", "t2", "t3"]
        assert ended == {"commit": [4], "rollback": [], "looks": 1}


    @pytest.mark.usefixtures("no_promotion_net")
    def test_claims_naming_the_same_queues_twice_or_once_claim_together(self, live_server, operator):
        """A batch is one set of queues, however a claim lists them: one transaction, a task each."""
        waiting = [Waiting(live_server, Worker(operator, "worker-0"), queues=["default", "default"])]
        wait_until(lambda: hub(live_server).waiting == 1, "the first claim to wait")
        waiting.append(Waiting(live_server, Worker(operator, "worker-1"), queues=["default"]))
        wait_until(lambda: hub(live_server).waiting == 2, "both claims to wait")
        with claim_transactions(live_server) as ended:
            operator.create_run(task("t0"), task("t1"))
            answers = [w.result() for w in waiting]
        assert sorted(item["correlation"]["task_id"] for items in answers for item in items) == ["t0", "t1"]
        assert ended["commit"] == [2]
