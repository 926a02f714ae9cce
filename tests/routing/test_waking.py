"""Waiting claims and routing, against a live server: a waiting claim is woken only by work on
its queues, and by room freed or added in a pool or under a tenant cap that held its work back.

Waits that must end in a claim are generous (a claim not woken would answer an empty list);
a wait that must not be woken is short, and its empty answer at its own deadline is the proof."""

import pytest

from tests.support.api import Attempt, Operator, Worker, json_of, task
from tests.support.claims import Waiting, hub, waiting_claims
from tests.support.waiting import wait_until


@pytest.fixture
def operator(live_server) -> Operator:
    return Operator(live_server.client())


def test_a_waiting_claim_on_queue_gpu_is_not_woken_by_default_work(live_server, operator):
    """The gpu waiter is the older: a wake-up blind to queues would go to it. The default work
    goes to the default waiter at once, the gpu waiter is still waiting after that, and it
    answers an empty list at its own deadline; the default task was never offered to it."""
    (gpu,) = waiting_claims(live_server, [Worker(operator, "gpu-worker")], wait=5, queues=["gpu"])
    default = Waiting(live_server, Worker(operator, "cpu-worker"))
    wait_until(lambda: hub(live_server).waiting == 2, "both claims waiting")
    ti_id = operator.create_run(task("t"))["task_instances"][0]["ti_id"]
    (item,) = default.result()
    assert item["correlation"]["ti_id"] == ti_id
    assert not gpu.future.done() and hub(live_server).waiting == 1  # never woken, still waiting
    assert gpu.result() == []


def test_default_work_created_while_a_gpu_claim_waits_stays_for_a_default_claimer(live_server, operator):
    gpu = waiting_claims(live_server, [Worker(operator, "gpu-worker")], wait=2, queues=["gpu"])[0]
    operator.create_run(task("t"))
    assert gpu.result() == []
    assert operator.find_ti("t")["state"] == "scheduled"
    assert Worker(operator, "cpu-worker").claim_one().task_id == "t"


def test_gpu_work_wakes_a_gpu_claim(live_server, operator):
    (gpu,) = waiting_claims(live_server, [Worker(operator, "gpu-worker")], queues=["cpu", "gpu"])
    operator.create_run(task("t", queue="gpu"))
    (item,) = gpu.result()
    assert item["correlation"]["task_id"] == "t"


def single_slot_pool_in_use(operator: Operator) -> tuple[Attempt, str]:
    """A 1-slot pool with two tasks: one claimed (answered), the other held back (its task_id)."""
    json_of(operator.post("/v1/pools", json={"name": "one", "slots": 1}), 201)
    operator.create_run(task("a", pool="one"), task("b", pool="one"))
    holder = Worker(operator, "worker-a").claim_one()
    return holder, {"a": "b", "b": "a"}[holder.task_id]


def test_a_freed_pool_slot_wakes_a_waiting_claim(live_server, operator):
    holder, held_back = single_slot_pool_in_use(operator)
    (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
    holder.report("running")
    holder.report("success")
    (item,) = waiting.result()
    assert item["correlation"]["task_id"] == held_back


def test_a_released_slot_wakes_a_waiting_claim(live_server, operator):
    holder, _ = single_slot_pool_in_use(operator)
    (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
    assert holder.release().status_code == 200
    (item,) = waiting.result()  # a or b: both fit the freed slot
    assert item["correlation"]["task_id"] in ("a", "b")


def test_growing_a_pool_wakes_a_waiting_claim(live_server, operator):
    _, held_back = single_slot_pool_in_use(operator)
    (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
    json_of(operator.patch("/v1/pools/one", json={"slots": 2}))
    (item,) = waiting.result()
    assert item["correlation"]["task_id"] == held_back


@pytest.mark.parametrize("change", ["raise", "delete"])
def test_raising_or_removing_a_tenant_cap_wakes_a_waiting_claim(live_server, operator, change):
    json_of(operator.put("/v1/tenants/acme", json={"max_running": 1}))
    json_of(operator.post("/v1/runs", json={"dag_id": "dag", "run_id": "run", "tenant_id": "acme",
                                            "tasks": [task("a"), task("b")]}), 201)
    held_back = {"a": "b", "b": "a"}[Worker(operator, "worker-a").claim_one().task_id]
    (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
    if change == "raise":
        json_of(operator.put("/v1/tenants/acme", json={"max_running": 2}))
    else:
        assert operator.delete("/v1/tenants/acme").status_code == 204
    (item,) = waiting.result()
    assert item["correlation"]["task_id"] == held_back


def test_a_freed_slot_does_not_wake_a_claim_that_found_nothing_ready(live_server, operator):
    """Room events wake only claims whose work a pool or a cap held back: a gpu claim with no
    gpu work stays asleep while default-pool slots come and go."""
    (gpu,) = waiting_claims(live_server, [Worker(operator, "gpu-worker")], wait=5, queues=["gpu"])
    operator.create_run(task("t"))
    done = Worker(operator, "cpu-worker").claim_one()
    done.report("running")
    done.report("success")
    assert not gpu.future.done() and hub(live_server).waiting == 1
    assert gpu.result() == []
