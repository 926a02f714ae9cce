"""Waiting claims on two replicas of one PostgreSQL database: each new task goes to exactly one
claimer, and a replica looks again after hearing of the other's writes."""

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.api import Attempt, Operator, Worker, assert_problem, json_of, task
from tests.support.claims import (
    Waiting,
    found_nothing,
    hub,
    waiting_claims,
)
from tests.support.waiting import wait_until


@pytest.mark.postgres_only("replicas share a PostgreSQL database")
def test_waiting_claimers_on_two_replicas_receive_each_new_task_exactly_once(replicas):
    """16 claimers, half on each replica, claim with waits until every task of four runs,
    created one after another while they wait, is taken."""
    one, two = replicas
    operator = Operator(one.client())
    workers = [Worker(operator, f"worker-{n}") for n in range(16)]
    total, taken, lock = 4 * 10, [], threading.Lock()
    all_taken = threading.Event()

    def claimer(n: int) -> None:
        server = replicas[n % 2]
        with server.client(verify=False) as http:
            while not all_taken.is_set():
                resp = http.post("/v1/dispatch/claim", json={"limit": 2, "wait_seconds": 2},
                                 headers=workers[n].headers)
                for item in json_of(resp)["items"]:
                    Attempt(http, item).report("running")
                    with lock:
                        taken.append(item["correlation"]["ti_id"])
                        if len(taken) >= total:
                            all_taken.set()

    with ThreadPoolExecutor(max_workers=len(workers)) as pool:
        futures = [pool.submit(claimer, n) for n in range(len(workers))]
        for run in range(4):
            wait_until(lambda: hub(one).waiting + hub(two).waiting >= 8, "claimers waiting on both replicas")
            operator.create_run(*(task(f"t{i}") for i in range(10)), run_id=f"run-{run}")
        all_taken.wait(timeout=120)
        all_taken.set()
        for future in futures:
            future.result(timeout=60)
    assert len(taken) == total and Counter(taken).most_common(1)[0][1] == 1
    assert hub(one).waiting + hub(two).waiting == 0


@pytest.mark.postgres_only("replicas share a PostgreSQL database")
@pytest.mark.usefixtures("no_promotion_net")
def test_a_replica_looks_again_after_hearing_of_another_replicas_writes(replicas):
    """A worker's waiting claims on one replica; the run that makes work ready, and the
    admission that supersedes the worker, go through the other."""
    one, two = replicas
    operator = Operator(two.client())
    worker = Worker(operator)
    found_nothing(one, worker)
    heard = hub(one).generation
    operator.create_run(task("t"))
    wait_until(lambda: hub(one).generation > heard, "replica one to hear of the run")
    (item,) = Waiting(one, worker, wait=3).result()
    assert item["correlation"]["task_id"] == "t"
    found_nothing(one, worker)
    (waiting,) = waiting_claims(one, [worker])
    worker.replacement()
    assert_problem(waiting.response(), 409, "stale-execution")
