"""Waiting claims and routing, against a live server: a waiting claim is woken only by work on
its queues, and by room freed or added in a pool or under a tenant cap that held its work back.

Waits that must end in a claim are generous (a claim not woken would answer an empty list); a
claim that must not be woken is watched in the server's hub, where the same waiter still waits
once the event was heard, and is then ended by work of its own."""

import pytest

from tests.support.api import Attempt, Operator, Worker, json_of, task
from tests.support.claims import Waiting, asleep, heard_after, hears, hub, waiting_claims
from tests.support.waiting import wait_until


@pytest.fixture
def live_server(fresh_server):
    """A server of each test's own: these tests assert what its hub of waiting claims heard, woke
    and looked at, which timers and marks left by a shared server's earlier tests would disturb."""
    return fresh_server


@pytest.fixture
def operator(live_server) -> Operator:
    return Operator(live_server.client())


def gpu_claim(server, operator: Operator) -> tuple[Waiting, object]:
    """A gpu worker's waiting claim on queue gpu, once the server hears every event: the claim
    and its waiter in the hub."""
    hears(server)
    (gpu,) = waiting_claims(server, [Worker(operator, "gpu-worker")], queues=["gpu"])
    (waiter,) = asleep(server)
    return gpu, waiter


def gpu_work_ends(gpu: Waiting, operator: Operator) -> None:
    """gpu work, created now, goes to the gpu claim, still waiting: its only item."""
    operator.create_run(task("g", queue="gpu"), run_id="gpu")
    assert [item["correlation"]["task_id"] for item in gpu.result()] == ["g"]


def test_a_waiting_claim_on_queue_gpu_is_not_woken_by_default_work(live_server, operator):
    """The gpu waiter is the older: a wake-up blind to queues would go to it. The default work
    goes to the default waiter at once, and the gpu waiter is never woken (the same waiter still
    waits in the hub); the default task was never offered to it."""
    gpu, waiter = gpu_claim(live_server, operator)
    default = Waiting(live_server, Worker(operator, "cpu-worker"))
    wait_until(lambda: hub(live_server).waiting == 2, "both claims waiting")
    ti_id = operator.create_run(task("t"))["task_instances"][0]["ti_id"]
    (item,) = default.result()
    assert item["correlation"]["ti_id"] == ti_id
    assert not gpu.future.done() and asleep(live_server) == [waiter]  # never woken, still waiting
    gpu_work_ends(gpu, operator)


def test_default_work_created_while_a_gpu_claim_waits_stays_for_a_default_claimer(live_server, operator):
    gpu, waiter = gpu_claim(live_server, operator)
    generation = hub(live_server).generation
    operator.create_run(task("t"))
    heard_after(live_server, generation, "the run's event")
    assert asleep(live_server) == [waiter]
    assert operator.find_ti("t")["state"] == "scheduled"
    gpu_work_ends(gpu, operator)
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
    gpu, waiter = gpu_claim(live_server, operator)
    operator.create_run(task("t"))
    done = Worker(operator, "cpu-worker").claim_one()
    done.report("running")
    generation = hub(live_server).generation
    done.report("success")
    heard_after(live_server, generation, "the freed slot's event")
    assert not gpu.future.done() and asleep(live_server) == [waiter]
    gpu_work_ends(gpu, operator)
