"""The Airflow 3 surface that airflowctl and the 3.x client touch beyond tries and logs, over
plain HTTP: CLI login, open version and health, DAG reads, the `~` wildcard, an empty `limit=`,
pools and jobs, and writes fenceline does not take."""

from tests.support.api import ADMIN_PASSWORD, Worker, bearer, task

TWO_DAGS = (("etl", "r1"), ("etl", "r2"), ("report", "r1"))


def make_runs(operator) -> None:
    for dag_id, run_id in TWO_DAGS:
        operator.create_run(task("a"), task("b", "a"), dag_id=dag_id, run_id=run_id)


class TestCliLogin:
    def test_a_good_password_gets_a_token_the_api_takes(self, client):
        resp = client.post("/auth/token/cli", json={"username": "admin", "password": ADMIN_PASSWORD},
                           headers=bearer("a-stale-token-from-an-earlier-login"))
        assert resp.status_code == 201 and set(resp.json()) == {"access_token"}
        assert client.get("/api/v2/dags", headers=bearer(resp.json()["access_token"])).status_code == 200

    def test_refusals_take_airflows_shape_and_media_type(self, client):
        bad = client.post("/auth/token/cli", json={"username": "admin", "password": "wrong"})
        assert (bad.status_code, bad.json()) == (401, {"detail": "Invalid credentials"})
        assert bad.headers["content-type"] == "application/json"
        empty = client.post("/auth/token/cli", json={"username": "admin", "password": ""})
        assert (empty.status_code, empty.json()) == (400, {"detail": "Username and password must be provided"})
        extra = client.post("/auth/token/cli", json={"username": "admin", "password": "x", "scope": "all"})
        assert extra.status_code == 422 and isinstance(extra.json()["detail"], list)


class TestOpenRoutes:
    def test_version_and_health_need_no_token(self, client):
        version = client.get("/api/v2/version")
        assert version.status_code == 200 and version.json()["version"]
        health = client.get("/api/v2/monitor/health").json()
        assert health["metadatabase"] == {"status": "healthy"}
        assert health["scheduler"]["status"] == "healthy" and health["scheduler"]["latest_scheduler_heartbeat"]

    def test_everything_else_under_api_v2_still_needs_one(self, client):
        assert client.get("/api/v2/pools").status_code == 401


class TestDags:
    def test_a_dag_is_known_by_its_runs(self, operator):
        make_runs(operator)
        assert operator.get("/api/v2/dags/etl").json()["dag_id"] == "etl"
        details = operator.get("/api/v2/dags/etl/details").json()
        assert (details["catchup"], details["concurrency"]) == (False, 16)
        missing = operator.get("/api/v2/dags/nothing")
        assert (missing.status_code, missing.json()) == (404, {"detail": "Dag with id: nothing was not found"})

    def test_writes_fenceline_does_not_take_say_where_runs_come_from(self, operator):
        make_runs(operator)
        for method, path in (("POST", "/api/v2/dags/etl/dagRuns"), ("PATCH", "/api/v2/dags/etl"),
                             ("DELETE", "/api/v2/dags/etl")):
            resp = operator.request(method, path, json={"is_paused": True})
            assert resp.status_code == 405, (method, path)
            assert "POST /v1/runs" in resp.json()["detail"] and resp.headers["allow"] == "GET"
        assert operator.get("/api/v2/dags/etl").json()["is_paused"] is False


class TestWildcard:
    def test_dag_runs_of_every_dag(self, operator):
        make_runs(operator)
        for prefix in ("/api/v2", "/api/v1"):
            body = operator.get(f"{prefix}/dags/~/dagRuns").json()
            assert sorted((r["dag_id"], r["dag_run_id"]) for r in body["dag_runs"]) == sorted(TWO_DAGS), prefix
            assert body["total_entries"] == 3

    def test_task_instances_across_runs(self, operator):
        make_runs(operator)
        for prefix in ("/api/v2", "/api/v1"):
            assert operator.get(f"{prefix}/dags/~/dagRuns/~/taskInstances").json()["total_entries"] == 6, prefix
            assert operator.get(f"{prefix}/dags/etl/dagRuns/~/taskInstances").json()["total_entries"] == 4, prefix
        v1 = operator.get("/api/v1/dags/~/dagRuns/r1/taskInstances").json()
        runs = {(t["dag_id"], t["dag_run_id"]) for t in v1["task_instances"]}
        assert sorted(runs) == [("etl", "r1"), ("report", "r1")]
        v2 = operator.get("/api/v2/dags/~/dagRuns/r1/taskInstances")
        assert (v2.status_code, v2.json()) == (400, {"detail": "dag_id is required when dag_run_id is specified"})

    def test_an_unknown_run_is_still_404(self, operator):
        make_runs(operator)
        assert operator.get("/api/v2/dags/etl/dagRuns/nope/taskInstances").status_code == 404


class TestEmptyLimit:
    def test_an_empty_limit_is_the_default(self, operator):
        for n in range(3):
            operator.create_run(task("a"), dag_id=f"dag{n}", run_id="r")
        for prefix in ("/api/v2", "/api/v1"):
            body = operator.get(f"{prefix}/dags?limit=&offset=").json()
            assert [d["dag_id"] for d in body["dags"]] == ["dag0", "dag1", "dag2"], prefix
            assert operator.get(f"{prefix}/dags/~/dagRuns?limit=").status_code == 200, prefix
        assert operator.get("/api/v2/dags?limit=x").status_code == 422


class TestPoolsAndJobs:
    def test_the_default_pool_counts_what_is_in_flight(self, operator):
        make_runs(operator)
        worker = Worker(operator)
        running = worker.claim(2)
        running[0].report("running")
        (pool,) = operator.get("/api/v2/pools").json()["pools"]
        assert pool["name"] == "default_pool" and pool["slots"] == 128
        assert (pool["running_slots"], pool["queued_slots"], pool["scheduled_slots"]) == (1, 1, 1)
        assert (pool["occupied_slots"], pool["open_slots"]) == (2, 126)

    def test_every_pool_shows_its_slot_use_on_both_apis(self, operator):
        operator.post("/v1/pools", json={"name": "gpus", "slots": 4, "description": "the GPU nodes"})
        operator.create_run(task("a", pool="gpus", pool_slots=3, priority_weight=2), task("b", pool="gpus"), task("c"))
        Worker(operator).claim(1)  # a, first by its weight: 3 of the 4 slots
        expected_gpus = {"name": "gpus", "slots": 4, "description": "the GPU nodes", "include_deferred": False,
                         "occupied_slots": 3, "running_slots": 0, "queued_slots": 3, "scheduled_slots": 1,
                         "open_slots": 1, "deferred_slots": 0}
        for api in ("v1", "v2"):
            body = operator.get(f"/api/{api}/pools").json()
            assert body["total_entries"] == 2
            assert [p["name"] for p in body["pools"]] == ["default_pool", "gpus"]
            assert body["pools"][1] == expected_gpus
            assert body["pools"][0]["scheduled_slots"] == 1
            assert operator.get(f"/api/{api}/pools?offset=1&limit=1").json()["pools"] == [expected_gpus]

    def test_task_instances_show_their_real_routes_on_both_apis(self, operator):
        operator.post("/v1/pools", json={"name": "gpus", "slots": 4})
        operator.create_run(task("a", queue="gpu", pool="gpus", pool_slots=2, priority_weight=9), task("b"))
        for api in ("v1", "v2"):
            tis = operator.get(f"/api/{api}/dags/dag/dagRuns/run/taskInstances").json()["task_instances"]
            routes = {ti["task_id"]: (ti["queue"], ti["pool"], ti["pool_slots"], ti["priority_weight"]) for ti in tis}
            assert routes == {"a": ("gpu", "gpus", 2, 9), "b": ("default", "default_pool", 1, 1)}, api

    def test_there_are_no_jobs(self, operator):
        assert operator.get("/api/v2/jobs").json() == {"jobs": [], "total_entries": 0}
