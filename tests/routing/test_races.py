"""Routing under real concurrency: claimers released together against live servers (two
replicas on PostgreSQL, one server on SQLite), each with its own connection."""

import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from sqlalchemy import insert
from sqlmodel import Session

from app.db.types import utcnow
from app.execution import dispatch
from app.main import create_app
from app.routing.models import Tenant
from tests.support.api import Operator, Worker, bearer, json_of, task
from tests.support.concurrency import race, wait_for_lock_waits
from tests.support.servers import LiveServer
from tests.support.settings import app_settings


@pytest.fixture
def servers(db_url, engine, is_postgres):
    """Two replicas on PostgreSQL; one server on SQLite (a file has one writer at a time)."""
    settings = app_settings(db_url)
    if not is_postgres:
        with LiveServer(create_app(settings)) as one:
            yield [one]
        return
    with LiveServer(create_app(settings)) as one, LiveServer(create_app(settings)) as two:
        yield [one, two]


def test_a_pool_of_two_never_has_more_than_two_in_flight(servers):
    """20 tasks in a 2-slot pool, 8 claimers on two replicas: checked at every claim and every
    report, by the claimers' own count (tasks claimed and not yet reported, a lower bound of
    what the server holds) and by the pool's occupied slots as the server reads them. The
    tasks sit on two queues and the claimers serve different ones, so that claimers choose
    different rows and only the pool's lock keeps them from overfilling it."""
    with servers[0].client() as http:
        operator = Operator(http)
        json_of(operator.post("/v1/pools", json={"name": "pair", "slots": 2}), 201)
        operator.create_run(*(task(f"t{i:02}", pool="pair", queue=("default", "gpu")[i % 2]) for i in range(20)))
        workers = [Worker(operator, f"worker-{n}") for n in range(8)]
    serves = [["default"], ["gpu"], ["gpu", "default"], ["gpu"]] * 2
    lock, held, peak, done, seen = threading.Lock(), [0], [0], [0], []

    def check(http_client):
        occupied = json_of(operator.on(http_client).get("/v1/pools/pair"))["occupied_slots"]
        with lock:
            seen.append(occupied)
            assert held[0] <= 2 and occupied <= 2, (held[0], occupied)

    def claimer(headers, queues):
        def run(http_client):
            taken = []
            while done[0] < 20:
                resp = http_client.post("/v1/dispatch/claim", json={"limit": 2, "queues": queues}, headers=headers)
                items = json_of(resp)["items"]
                with lock:
                    held[0] += len(items)
                    peak[0] = max(peak[0], held[0])
                check(http_client)
                for item in items:
                    taken.append(item["correlation"]["ti_id"])
                    with lock:
                        held[0] -= 1
                    json_of(http_client.post("/v1/attempts/report", json={"state": "success"},
                                             headers=bearer(item["attempt_token"])))
                    with lock:
                        done[0] += 1
                    check(http_client)
            return taken
        return run

    results = race(servers, [claimer(w.headers, q) for w, q in zip(workers, serves, strict=True)])
    claimed = [ti for got in results for ti in got]
    assert len(claimed) == 20 and max(Counter(claimed).values()) == 1
    assert peak[0] <= 2 and max(seen) <= 2 and 2 in seen  # the pool filled, and never overfilled
    with servers[0].client() as http:
        assert Operator(http, operator.token).run()["state"] == "success"


def test_no_claimer_ever_takes_work_of_a_queue_it_does_not_serve(servers):
    with servers[0].client() as http:
        operator = Operator(http)
        queues = {"default": 12, "gpu": 12, "io": 12}
        run = operator.create_run(*(task(f"{q}{i:02}", queue=q) for q, n in queues.items() for i in range(n)))
        queue_of = {ti["ti_id"]: ti["queue"] for ti in run["task_instances"]}
        serves = [["gpu"], ["default"], ["io", "gpu"], ["default", "io"], ["gpu"], ["default"]]
        workers = [Worker(operator, f"worker-{n}") for n in range(len(serves))]

    def claimer(headers, queues_served):
        def run_(http_client):
            got = []
            while items := json_of(http_client.post("/v1/dispatch/claim", json={"limit": 3, "queues": queues_served},
                                                    headers=headers))["items"]:
                got += [item["correlation"]["ti_id"] for item in items]
            return queues_served, got
        return run_

    results = race(servers, [claimer(w.headers, q) for w, q in zip(workers, serves, strict=True)])
    for served, got in results:
        assert {queue_of[ti] for ti in got} <= set(served)
    claimed = [ti for _, got in results for ti in got]
    assert sorted(claimed) == sorted(queue_of)  # every task once


def test_a_small_tenant_is_served_in_the_first_claim_round_beside_a_tenant_with_1000_ready(servers):
    """Tenants big (1,000 ready, the oldest), mid (20) and small (1): three claimers racing
    one claim each take one task of each tenant."""
    with servers[0].client() as http:
        operator = Operator(http)
        oldest = {}  # a run's task instances share their creation time; the claim's order then takes the least id
        for tenant, n in (("big", 1000), ("mid", 20), ("small", 1)):
            run = json_of(operator.post("/v1/runs", json={"dag_id": "dag", "run_id": tenant, "tenant_id": tenant,
                                                          "tasks": [task(f"t{i:04}") for i in range(n)]}), 201)
            oldest[tenant] = min(ti["ti_id"] for ti in run["task_instances"])
        workers = [Worker(operator, f"worker-{n}") for n in range(3)]

    def claimer(headers):
        def run(http_client):
            (item,) = json_of(http_client.post("/v1/dispatch/claim", json={"limit": 1}, headers=headers))["items"]
            return item["correlation"]
        return run

    firsts = race(servers, [claimer(w.headers) for w in workers])
    assert sorted(c["tenant_id"] for c in firsts) == ["big", "mid", "small"]
    assert {c["tenant_id"]: c["ti_id"] for c in firsts} == oldest


def test_a_tenant_cap_holds_under_concurrent_claims(servers):
    """The capped tenant's tasks are split across two pools on two queues, and the claimers
    serve one queue or the other, so that they lock different pools and only the tenant's own
    lock keeps them from exceeding its cap."""
    with servers[0].client() as http:
        operator = Operator(http)
        json_of(operator.put("/v1/tenants/acme", json={"max_running": 3}))
        routes = [{"queue": "qa", "pool": "pa"}, {"queue": "qb", "pool": "pb"}]
        for route in routes:
            json_of(operator.post("/v1/pools", json={"name": route["pool"], "slots": 100}), 201)
        for tenant in ("acme", "other"):
            json_of(operator.post("/v1/runs", json={"dag_id": "dag", "run_id": tenant, "tenant_id": tenant, "tasks": [
                task(f"t{i:02}", **routes[i % 2]) for i in range(16)]}), 201)
        workers = [Worker(operator, f"worker-{n}") for n in range(8)]

    def claimer(headers, queue):
        def run(http_client):
            got = []
            for _ in range(3):
                items = json_of(http_client.post("/v1/dispatch/claim", json={"limit": 4, "queues": [queue]},
                                                 headers=headers))["items"]
                got += [item["correlation"]["tenant_id"] for item in items]
            return got
        return run

    results = race(servers, [claimer(w.headers, ("qa", "qb")[n % 2]) for n, w in enumerate(workers)])
    assert Counter(t for got in results for t in got) == {"acme": 3, "other": 16}
    with servers[0].client() as http:
        assert json_of(Operator(http, operator.token).get("/v1/tenants/acme"))["queued"] == 3


def test_concurrent_claims_take_the_highest_weights_first(servers):
    with servers[0].client() as http:
        operator = Operator(http)
        run = operator.create_run(*(task(f"low{i:02}") for i in range(30)),
                                  *(task(f"urgent{i}", priority_weight=50 + i) for i in range(6)))
        assert len(run["task_instances"]) == 36
        workers = [Worker(operator, f"worker-{n}") for n in range(6)]

    def claimer(headers):
        def run_(http_client):
            (item,) = json_of(http_client.post("/v1/dispatch/claim", json={"limit": 1}, headers=headers))["items"]
            return item["correlation"]["task_id"]
        return run_

    assert sorted(race(servers, [claimer(w.headers) for w in workers])) == [f"urgent{i}" for i in range(6)]


@pytest.mark.postgres_only("SQLite serialises whole transactions: there is no lock order to get wrong")
def test_a_cap_set_while_a_claim_is_in_flight_deadlocks_no_claim(servers, engine):
    """Claim A holds pool pa and the capped tenant t5, and is about to record tenant t1's turn;
    then t1 gets a cap, and claim B (pool pb) locks the capped tenants, t1 before t5. Were the
    cap set at once, B would hold t1 and wait for A's t5 while A waited for B's t1, and
    PostgreSQL would abort one. A test transaction holding the row A claims pauses A there."""
    server = servers[0]
    with server.client() as http:
        operator = Operator(http)
        json_of(operator.put("/v1/tenants/t5", json={"max_running": 100}))
        for name in ("pa", "pb"):
            json_of(operator.post("/v1/pools", json={"name": name, "slots": 100}), 201)
        runs = {tenant: json_of(operator.post("/v1/runs", json={
            "dag_id": "dag", "run_id": tenant, "tenant_id": tenant,
            "tasks": [task("t", queue=queue, pool=pool)]}), 201)["task_instances"][0]["ti_id"]
            for tenant, queue, pool in (("t1", "qa", "pa"), ("t5", "qb", "pb"))}
        a, b = Worker(operator, "worker-a"), Worker(operator, "worker-b")

    def claim(worker, queue):
        with server.client() as client:
            return client.post("/v1/dispatch/claim", json={"limit": 1, "queues": [queue]}, headers=worker.headers)

    def set_cap():
        with server.client() as client:
            return operator.on(client).put("/v1/tenants/t1", json={"max_running": 100})

    with ThreadPoolExecutor(max_workers=3) as threads, engine.connect() as pause:
        pause.exec_driver_sql(f"SELECT 1 FROM task_instances WHERE id = '{runs['t1']}' FOR UPDATE")
        claim_a = threads.submit(claim, a, "qa")
        wait_for_lock_waits(engine, 1)  # A holds pa and t5, and waits on the row
        cap = threads.submit(set_cap)
        waiting = wait_for_lock_waits(engine, 2, unless=cap.done)
        claim_b = threads.submit(claim, b, "qb")
        wait_for_lock_waits(engine, waiting + 1)  # B holds pb, waiting on t5 (or on the cap's change)
        pause.rollback()
        answers = [future.result(timeout=60) for future in (claim_a, cap, claim_b)]
    assert [r.status_code for r in answers] == [200, 200, 200], [r.text for r in answers]
    claimed = [json_of(r)["items"][0]["correlation"]["ti_id"] for r in (answers[0], answers[2])]
    assert claimed == [runs["t1"], runs["t5"]]
    with server.client() as http:
        assert json_of(Operator(http, operator.token).get("/v1/tenants/t1"))["max_running"] == 100


@pytest.mark.postgres_only("SQLite serialises whole transactions: there is no lock order to get wrong")
def test_claims_made_together_and_a_claim_of_two_tenants_deadlock_no_claim(servers, engine):
    """Claims made together (dispatch.claim_each, pool pa) take their tenants' turns in claim
    order, t2 before t1 (t1 was served last); a claim of two (pool pb) takes t1's then t2's.
    The first of the claims made together holds t2's turn, and a test transaction holding the
    row the second would claim pauses it there, before t1's. Had the claim of two then taken
    t1's turn, each would wait for the other's; it waits for the claims made together instead."""
    with servers[0].client() as http:
        operator = Operator(http)
        for name in ("pa", "pb"):
            json_of(operator.post("/v1/pools", json={"name": name, "slots": 100}), 201)
        ti_ids = {}
        for tenant in ("t1", "t2"):
            run = json_of(operator.post("/v1/runs", json={"dag_id": "dag", "run_id": tenant, "tenant_id": tenant,
                                                          "tasks": [task("a", queue="qa", pool="pa"),
                                                                    task("b", queue="qb", pool="pb")]}), 201)
            ti_ids[tenant] = {ti["task_id"]: ti["ti_id"] for ti in run["task_instances"]}
        together = [uuid.UUID(Worker(operator, f"worker-{n}").execution_id) for n in range(2)]
        alone = uuid.UUID(Worker(operator, "worker-alone").execution_id)
    with engine.begin() as conn:  # t1 was served last: the claims of pa take t2 first
        conn.execute(insert(Tenant.__table__), [{"tenant_id": "t1", "last_claimed_at": utcnow()},
                                                {"tenant_id": "t2", "last_claimed_at": utcnow() - timedelta(hours=1)}])

    def claim(claims, queue):
        with Session(engine) as session:
            answers = dispatch.claim_each(session=session, claims=claims, queues=[queue])
            session.commit()
            return [[row.tenant_id for row in answer.rows] for answer in answers]

    with ThreadPoolExecutor(max_workers=2) as threads, engine.connect() as pause:
        pause.exec_driver_sql(f"SELECT 1 FROM task_instances WHERE id = '{ti_ids['t1']['a']}' FOR UPDATE")
        claimed_together = threads.submit(claim, [(e, 1) for e in together], "qa")
        wait_for_lock_waits(engine, 1)  # the first holds t2's turn; the second waits on t1's row
        claimed_alone = threads.submit(claim, [(alone, 2)], "qb")
        wait_for_lock_waits(engine, 2)  # the claim of two waits too: for the claims made together
        pause.rollback()
        assert claimed_together.result(timeout=60) == [["t2"], ["t1"]]
        assert sorted(*claimed_alone.result(timeout=60)) == ["t1", "t2"]
