"""Pools and tenant caps through the API, and what they make a claim take (one claimer at a
time; tests/routing/test_races.py races claimers against live servers)."""

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import insert
from sqlmodel import Session

from app.db.types import utcnow
from app.execution import dispatch
from app.routing.models import Tenant
from tests.support.api import Operator, Worker, assert_problem, json_of, task


def pool(operator: Operator, name: str) -> dict:
    return json_of(operator.get(f"/v1/pools/{name}"))


def make_pool(operator: Operator, name: str, slots: int) -> dict:
    return json_of(operator.post("/v1/pools", json={"name": name, "slots": slots}), 201)


def claimed_task_ids(worker: Worker, limit: int = 10, queues: list[str] | None = None) -> list[str]:
    return sorted(a.task_id for a in worker.claim(limit, queues))


class TestPools:
    def test_the_default_pool_has_airflows_128_slots(self, operator):
        assert json_of(operator.get("/v1/pools")) == {"items": [{
            "name": "default_pool", "slots": 128, "description": "Default pool", "occupied_slots": 0,
            "queued_slots": 0, "running_slots": 0, "scheduled_slots": 0, "open_slots": 128}], "total_entries": 1}

    def test_create_read_resize_and_delete(self, operator):
        created = make_pool(operator, "db-loads", 4)
        assert (created["name"], created["slots"], created["open_slots"]) == ("db-loads", 4, 4)
        patched = json_of(operator.patch("/v1/pools/db-loads", json={"slots": 2, "description": "the warehouse"}))
        assert (patched["slots"], patched["description"]) == (2, "the warehouse")
        assert [p["name"] for p in json_of(operator.get("/v1/pools"))["items"]] == ["db-loads", "default_pool"]
        assert operator.delete("/v1/pools/db-loads").status_code == 204
        assert_problem(operator.get("/v1/pools/db-loads"), 404, "pool-not-found")

    def test_refusals_change_nothing(self, operator):
        make_pool(operator, "db-loads", 4)
        assert_problem(operator.post("/v1/pools", json={"name": "db-loads", "slots": 9}), 409, "pool-exists")
        assert_problem(operator.post("/v1/pools", json={"name": "../x", "slots": 1}), 422, "validation-error")
        assert_problem(operator.post("/v1/pools", json={"name": "p", "slots": -1}), 422, "validation-error")
        assert_problem(operator.patch("/v1/pools/db-loads", json={"slots": 1, "x": 1}), 422, "validation-error")
        assert_problem(operator.patch("/v1/pools/nope", json={"slots": 1}), 404, "pool-not-found")
        assert_problem(operator.delete("/v1/pools/nope"), 404, "pool-not-found")
        assert_problem(operator.delete("/v1/pools/default_pool"), 409, "pool-in-use")
        assert pool(operator, "db-loads")["slots"] == 4

    def test_a_pool_unfinished_work_names_cannot_be_deleted(self, operator):
        make_pool(operator, "db-loads", 4)
        operator.create_run(task("a", pool="db-loads"))
        assert_problem(operator.delete("/v1/pools/db-loads"), 409, "pool-in-use")
        assert pool(operator, "db-loads")["scheduled_slots"] == 1  # the refused delete rolled back

    def test_a_run_naming_an_unknown_pool_or_too_many_slots_is_refused_whole(self, operator):
        make_pool(operator, "db-loads", 4)
        unknown = operator.post("/v1/runs", json={"dag_id": "dag", "run_id": "run", "tasks": [
            task("a", pool="db-loads"), task("b", pool="nope")]})
        assert "'nope'" in assert_problem(unknown, 422, "unknown-pool")["detail"]
        too_big = operator.post("/v1/runs", json={"dag_id": "dag", "run_id": "run", "tasks": [
            task("a", pool="db-loads", pool_slots=5)]})
        assert_problem(too_big, 422, "pool-too-small")
        assert_problem(operator.get("/v1/runs/dag/run"), 404, "run-not-found")

    def test_a_pool_caps_the_slots_in_flight_and_a_report_frees_them(self, operator):
        make_pool(operator, "db-loads", 3)
        operator.create_run(task("big", pool="db-loads", pool_slots=2, priority_weight=3),
                            task("s1", pool="db-loads", priority_weight=2), task("s2", pool="db-loads"), task("free"))
        worker = Worker(operator)
        first = worker.claim(10)
        assert sorted(a.task_id for a in first) == ["big", "free", "s1"]  # 2 + 1 slots; s2 waits
        use = pool(operator, "db-loads")
        assert (use["occupied_slots"], use["queued_slots"], use["scheduled_slots"], use["open_slots"]) == (3, 3, 1, 0)
        assert worker.claim(10) == []
        next(a for a in first if a.task_id == "s1").report("success")
        assert claimed_task_ids(worker) == ["s2"]

    def test_shrinking_a_pool_stops_claims_and_never_stops_running_work(self, operator):
        make_pool(operator, "db-loads", 3)
        operator.create_run(*(task(f"t{i}", pool="db-loads") for i in range(5)))
        worker = Worker(operator)
        running = worker.claim(10)
        for attempt in running:
            attempt.report("running")
        json_of(operator.patch("/v1/pools/db-loads", json={"slots": 1}))
        assert pool(operator, "db-loads")["open_slots"] == -2
        assert worker.claim(10) == []
        running[0].report("success")
        running[1].report("success")
        assert worker.claim(10) == []  # 1 still running fills the one slot
        running[2].report("success")
        assert len(worker.claim(10)) == 1
        assert {operator.ti(a.ti_id)["state"] for a in running} == {"success"}

    def test_a_task_larger_than_its_shrunk_pool_waits_without_holding_back_the_rest(self, operator):
        make_pool(operator, "db-loads", 3)
        operator.create_run(task("big", pool="db-loads", pool_slots=3), task("small", pool="db-loads"))
        json_of(operator.patch("/v1/pools/db-loads", json={"slots": 1}))
        assert claimed_task_ids(Worker(operator)) == ["small"]


class TestQueuesAndPriorities:
    def test_a_claim_takes_only_work_on_the_queues_it_serves(self, operator):
        operator.create_run(task("cpu"), task("gpu", queue="gpu"), task("io", queue="io"))
        worker = Worker(operator)
        assert claimed_task_ids(worker, queues=["gpu"]) == ["gpu"]
        assert claimed_task_ids(worker) == ["cpu"]  # a claim serves `default` unless it says otherwise
        assert claimed_task_ids(worker, queues=["gpu", "default"]) == []
        assert claimed_task_ids(worker, queues=["io", "gpu"]) == ["io"]

    def test_bad_queues_are_refused(self, operator):
        worker = Worker(operator)
        for queues in ([], ["../x"], ["a"] * 51):
            assert_problem(worker.claim_response(1, queues), 422, "validation-error")

    def test_higher_weights_are_claimed_first_and_equal_weights_oldest_first(self, operator):
        runs = [{"low": -5, "a": 1, "urgent": 100}, {"b": 1, "high": 10}, {"c": 1}]  # a, b, c: oldest first
        for n, weights in enumerate(runs):
            operator.create_run(*(task(name, priority_weight=w) for name, w in weights.items()), run_id=f"r{n}")
        worker = Worker(operator)
        order = [worker.claim_one().task_id for _ in range(6)]
        assert order == ["urgent", "high", "a", "b", "c", "low"]

    def test_task_instances_show_their_routes(self, operator):
        operator.post("/v1/pools", json={"name": "gpus", "slots": 8})
        run = operator.create_run(task("a", queue="gpu", pool="gpus", pool_slots=2, priority_weight=7), task("b"))
        routes = {ti["task_id"]: (ti["queue"], ti["pool"], ti["pool_slots"], ti["priority_weight"])
                  for ti in run["task_instances"]}
        assert routes == {"a": ("gpu", "gpus", 2, 7), "b": ("default", "default_pool", 1, 1)}


class TestTenants:
    def create_tenant_run(self, operator, tenant, n, **fields):
        body = {"dag_id": "dag", "run_id": f"run-{tenant}", "tenant_id": tenant,
                "tasks": [task(f"t{i:04}", **fields) for i in range(n)]}
        return json_of(operator.post("/v1/runs", json=body), 201)

    def test_tenants_take_turns_among_equal_weights(self, operator):
        self.create_tenant_run(operator, "big", 30)
        self.create_tenant_run(operator, "mid", 3)
        operator.create_run(task("none1"), task("none2"))  # no tenant: one more tenant
        self.create_tenant_run(operator, "small", 1)
        worker = Worker(operator)
        runs = [worker.claim_one().item["correlation"] for _ in range(8)]
        tenants = [c["tenant_id"] for c in runs]
        assert sorted(tenants[:4], key=str) == sorted(["big", "mid", None, "small"], key=str)
        assert sorted(tenants[4:7], key=str) == sorted(["big", "mid", None], key=str)
        assert tenants[7] == "big"

    def test_claims_made_together_take_turns_as_claims_made_one_after_another(self, operator, engine):
        """The claims of waiters woken together, in one transaction (dispatch.claim_each):
        each sees the turns those before it took, one that may not claim is refused without
        changing what the others take, and once one finds nothing the rest are still checked."""
        self.create_tenant_run(operator, "big", 2)
        self.create_tenant_run(operator, "small", 1)
        workers = [Worker(operator, f"worker-{n}") for n in range(6)]
        for stale in (workers[1], workers[5]):
            stale.replacement()
        with Session(engine) as session:
            answers = dispatch.claim_each(session=session, queues=["default"],
                                          claims=[(uuid.UUID(w.execution_id), 1) for w in workers])
            session.commit()
        assert [(a.status, a.type) for a in (answers[1], answers[5])] == [(409, "stale-execution")] * 2
        taken = [[row.tenant_id for row in answers[n].rows] for n in (0, 2, 3, 4)]
        assert taken == [["big"], ["small"], ["big"], []]
        assert answers[4].held_back is False  # nothing is left, rather than held back by a pool or a cap
        assert all(str(row.execution_id) == workers[n].execution_id for n in (0, 2, 3) for row in answers[n].rows)
        assert {ti["state"] for tenant in ("big", "small")
                for ti in operator.run(run_id=f"run-{tenant}")["task_instances"]} == {"queued"}

    def test_claims_made_together_each_take_a_turn_after_the_one_before(self, operator, engine):
        """Tenant a was served an hour ago, b half an hour ago, and b's tasks are the older:
        four claims made together take a, b, a, b, as four claims one after another do (their
        turns are not one time, which the older tasks would then win)."""
        self.create_tenant_run(operator, "b", 2)
        self.create_tenant_run(operator, "a", 2)
        with engine.begin() as conn:
            conn.execute(insert(Tenant.__table__), [
                {"tenant_id": "a", "last_claimed_at": utcnow() - timedelta(hours=1)},
                {"tenant_id": "b", "last_claimed_at": utcnow() - timedelta(minutes=30)}])
        workers = [Worker(operator, f"worker-{n}") for n in range(4)]
        with Session(engine) as session:
            answers = dispatch.claim_each(session=session, queues=["default"],
                                          claims=[(uuid.UUID(w.execution_id), 1) for w in workers])
            session.commit()
        assert [row.tenant_id for answer in answers for row in answer.rows] == ["a", "b", "a", "b"]

    def test_a_tenant_cap_counts_queued_and_running(self, operator):
        assert json_of(operator.put("/v1/tenants/acme", json={"max_running": 2}))["max_running"] == 2
        self.create_tenant_run(operator, "acme", 5)
        self.create_tenant_run(operator, "other", 5)
        worker = Worker(operator)
        first = worker.claim(10)
        assert sum(a.item["correlation"]["tenant_id"] == "acme" for a in first) == 2
        first[0].report("running")
        assert json_of(operator.get("/v1/tenants/acme")) == {
            "tenant_id": "acme", "max_running": 2, "queued": 1, "running": 1}
        assert worker.claim(10) == []
        next(a for a in first if a.item["correlation"]["tenant_id"] == "acme").report("success")
        assert [a.item["correlation"]["tenant_id"] for a in worker.claim(10)] == ["acme"]
        assert operator.delete("/v1/tenants/acme").status_code == 204
        assert len(worker.claim(10)) == 2
        assert json_of(operator.get("/v1/tenants/acme"))["max_running"] is None

    @pytest.mark.parametrize("body", [{"max_running": -1}, {}, {"max_running": 1, "x": 2}])
    def test_a_bad_cap_is_refused(self, operator, body):
        assert_problem(operator.put("/v1/tenants/acme", json=body), 422, "validation-error")
        assert json_of(operator.get("/v1/tenants/acme"))["max_running"] is None
