"""/metrics (contract 8): what an operator alerts on, read as Prometheus reads it, and the
metrics token that may read it and nothing else."""

import json
import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.api import Operator, Worker, assert_problem, assert_stale, bearer, superseded, task
from tests.support.scrape import sample


def families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


class TestExposition:
    def test_every_named_family_is_there_and_parses(self, operator):
        Worker(operator).claim()  # some traffic first
        names = families(operator.get("/metrics").text)
        for name in ("fenceline_http_requests", "fenceline_http_request_duration_seconds", "fenceline_task_instances",
                     "fenceline_claims", "fenceline_claimed_task_instances", "fenceline_reports",
                     "fenceline_stale_reports", "fenceline_reaper_sweep_duration_seconds", "fenceline_reaper_marks",
                     "fenceline_log_bytes_appended", "fenceline_db_pool_connections_in_use",
                     "fenceline_db_pool_overflow_connections",
                     # the two the contract fixed (1.3, 3.4), unchanged
                     "execution_identity_conflicts", "agent_legacy_attempt_token"):
            assert name in names, name

    @pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus) is not installed")
    def test_promtool_finds_nothing_to_lint(self, operator):
        attempt = (operator.create_run(), Worker(operator).claim_one())[1]
        attempt.report("running")
        done = subprocess.run(["promtool", "check", "metrics"], input=operator.get("/metrics").text,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.strip() == "" and done.stderr.strip() == ""


class TestRequests:
    def test_counted_by_route_template_method_and_status(self, operator):
        labels = {"method": "GET", "route": "/v1/runs/{dag_id}/{run_id}", "status": "404"}
        before = sample(operator, "fenceline_http_requests_total", **labels)
        for run_id in ("a", "b", "c"):
            assert operator.get(f"/v1/runs/dag/{run_id}").status_code == 404
        assert sample(operator, "fenceline_http_requests_total", **labels) == before + 3
        assert sample(operator, "fenceline_http_request_duration_seconds_count", **labels) == before + 3

    def test_a_path_no_route_serves_is_unmatched_not_its_path(self, operator):
        labels = {"method": "GET", "route": "unmatched", "status": "404"}
        before = sample(operator, "fenceline_http_requests_total", **labels)
        operator.get("/no/such/thing")
        assert sample(operator, "fenceline_http_requests_total", **labels) == before + 1
        assert "/no/such/thing" not in operator.get("/metrics").text


class TestTaskInstancesByState:
    def test_counted_from_the_database_at_scrape_time(self, operator):
        operator.create_run(task("a"), task("b"), task("c", "a"))
        Worker(operator).claim_one().report("running")
        assert sample(operator, "fenceline_task_instances", state="running") == 1
        assert sample(operator, "fenceline_task_instances", state="scheduled") == 1
        assert sample(operator, "fenceline_task_instances", state="none") == 1
        by_state = [s for s in families(operator.get("/metrics").text)["fenceline_task_instances"]]
        assert {s.labels["state"] for s in by_state} >= {"success", "failed", "queued", "up_for_retry"}
        assert sum(s.value for s in by_state) == 3


class TestExecution:
    def test_claims_reports_by_outcome_and_log_bytes(self, operator):
        operator.create_run(task("a"), task("b"))
        worker = Worker(operator)
        counted = {name: sample(operator, name) for name in (
            "fenceline_claims_total", "fenceline_claimed_task_instances_total", "fenceline_log_bytes_appended_total")}
        success = sample(operator, "fenceline_reports_total", outcome="success")
        first, second = worker.claim(10)
        worker.claim(10)  # nothing left: a claim all the same
        first.report("running")
        first.append_log(0, "héllo\n")  # 7 bytes
        first.report("success")
        assert sample(operator, "fenceline_claims_total") == counted["fenceline_claims_total"] + 2
        assert sample(operator, "fenceline_claimed_task_instances_total") == (
            counted["fenceline_claimed_task_instances_total"] + 2)
        assert sample(operator, "fenceline_log_bytes_appended_total") == (
            counted["fenceline_log_bytes_appended_total"] + 7)
        assert sample(operator, "fenceline_reports_total", outcome="success") == success + 1
        assert second.report("running")

    def test_stale_reports_by_route_and_reaper_marks(self, operator):
        route = {"route": "/v1/attempts/heartbeat"}
        stale, marks = (sample(operator, "fenceline_stale_reports_total", **route),
                        sample(operator, "fenceline_reaper_marks_total", reason="worker_lost"))
        sweeps = sample(operator, "fenceline_reaper_sweep_duration_seconds_count")
        old, _ = superseded(operator)  # one sweep, one worker_lost mark
        assert_stale(old.heartbeat())
        assert sample(operator, "fenceline_stale_reports_total", **route) == stale + 1
        assert sample(operator, "fenceline_reaper_marks_total", reason="worker_lost") == marks + 1
        assert sample(operator, "fenceline_reaper_sweep_duration_seconds_count") == sweeps + 1


class TestSeriesFromTheStart:
    """A counter whose label values are known is at 0 from the start, so that `increase()` sees
    its first event (a series that appears at 1 has no increase to show)."""

    def test_a_fresh_server_exposes_them_at_zero(self, tmp_path):
        import httpx

        from tests.support.servers import Served, clean_env

        server = Served(tmp_path, {**clean_env(tmp_path / "data"), "FENCELINE_ADMIN_PASSWORD": "pw"})
        try:
            server.wait_healthy()
            with httpx.Client(base_url=server.url) as client:
                exposed = families(client.get("/metrics", auth=("admin", "pw")).text)
                document = client.get("/openapi.json").json()
                operator = Operator(client, password="pw")
                operator.admit("w1", swarm="etl")
                conflicts = families(operator.get("/metrics").text)["execution_identity_conflicts"]

            def zero(family: str, label: str) -> set[str]:
                assert all(s.value == 0 for s in exposed[family] if s.name == f"{family}_total")
                return {s.labels[label] for s in exposed[family] if s.name == f"{family}_total"}

            assert zero("fenceline_reports", "outcome") == {"running", "success", "failed", "unexecutable",
                                                            "rescheduled"}
            assert zero("fenceline_reaper_marks", "reason") == {"agent_lost", "dispatch_lost", "worker_lost"}
            assert zero("fenceline_log_store_errors", "reason") == {"enospc", "edquot", "erofs", "eio", "probe"}
            assert zero("fenceline_http_heads_refused", "reason") == {"too_large", "timeout"}
            assert zero("fenceline_tokens_without_audience", "kind") >= {"attempt", "worker", "operator"}
            documented_stale = {path for path, operations in document["paths"].items()
                                for operation in operations.values()
                                if "StaleReport" in json.dumps(operation.get("responses", {}).get("409", {}))}
            assert zero("fenceline_stale_reports", "route") == documented_stale | {"/v1/attempts/batch"}
            waits = {s.labels["outcome"]: s.value for s in exposed["fenceline_claim_wait_seconds"]
                     if s.name == "fenceline_claim_wait_seconds_count"}
            assert waits == {"claimed": 0, "empty": 0}
            # a swarm's conflicts, from its first admission
            assert {s.labels["reason"] for s in conflicts
                    if s.labels["swarm"] == "etl" and s.name.endswith("_total") and s.value == 0} >= {
                "stale-predecessor", "stale-update", "identity-conflict", "execution-rotated"}
        finally:
            server.stop()


class TestWaitingClaims:
    def test_the_time_a_claim_waits_is_not_latency(self, operator):
        worker = Worker(operator)
        route = {"method": "POST", "route": "/v1/dispatch/claim", "status": "200"}
        latency = {part: sample(operator, f"fenceline_http_request_duration_seconds_{part}", **route)
                   for part in ("sum", "count")}
        waits = {part: sample(operator, f"fenceline_claim_wait_seconds_{part}", outcome="empty")
                 for part in ("sum", "count")}
        resp = worker.client.post("/v1/dispatch/claim", json={"limit": 1, "wait_seconds": 1}, headers=worker.headers)
        assert resp.status_code == 200 and resp.json()["items"] == []
        assert sample(operator, "fenceline_http_request_duration_seconds_count", **route) == latency["count"] + 1
        assert sample(operator, "fenceline_http_request_duration_seconds_sum", **route) < latency["sum"] + 0.5
        assert sample(operator, "fenceline_claim_wait_seconds_count", outcome="empty") == waits["count"] + 1
        assert sample(operator, "fenceline_claim_wait_seconds_sum", outcome="empty") >= waits["sum"] + 0.9

    def test_a_claim_that_finds_work_at_once_did_not_wait(self, operator):
        operator.create_run()
        worker = Worker(operator)
        before = {outcome: sample(operator, "fenceline_claim_wait_seconds_count", outcome=outcome)
                  for outcome in ("claimed", "empty")}
        resp = worker.client.post("/v1/dispatch/claim", json={"limit": 1, "wait_seconds": 5}, headers=worker.headers)
        assert len(resp.json()["items"]) == 1
        assert {outcome: sample(operator, "fenceline_claim_wait_seconds_count", outcome=outcome)
                for outcome in ("claimed", "empty")} == before


class TestMetricsToken:
    def test_it_reads_metrics(self, client, operator):
        token = operator.post("/v1/auth/metrics-tokens").json()["metrics_token"]
        resp = client.get("/metrics", headers=bearer(token))
        assert resp.status_code == 200
        assert "fenceline_http_requests_total" in resp.text

    def test_it_reads_nothing_else(self, client, operator):
        token = bearer(operator.post("/v1/auth/metrics-tokens").json()["metrics_token"])
        for method, path in [("GET", "/v1/runs"), ("POST", "/v1/runs"), ("GET", "/v1/admin/snapshot"),
                             ("POST", "/v1/auth/launcher-tokens"), ("POST", "/v1/auth/metrics-tokens"),
                             ("POST", "/v1/dispatch/claim"), ("POST", "/v1/attempts/report"),
                             ("GET", "/v1/seats/w1/executions"), ("GET", "/api/v2/dags")]:
            resp = client.request(method, path, headers=token, json={})
            assert resp.status_code == 403, (method, path, resp.status_code)

    def test_other_kinds_of_token_are_refused_on_metrics(self, client, operator):
        operator.create_run()
        admitted = operator.admit("w1")
        attempt = Worker(operator, "w2").claim_one()
        for token in (operator.launcher_token(), admitted["worker_token"], attempt.token):
            assert_problem(client.get("/metrics", headers=bearer(token)), 403, "forbidden")
        assert_problem(client.get("/metrics"), 401, "unauthorized")

    def test_only_an_operator_mints_one(self, client, operator):
        assert client.post("/v1/auth/metrics-tokens").status_code == 401
        launcher = bearer(operator.launcher_token())
        assert client.post("/v1/auth/metrics-tokens", headers=launcher).status_code == 403
        minted = operator.post("/v1/auth/metrics-tokens")
        assert minted.status_code == 201 and minted.json()["expires_in"] == 365 * 24 * 3600


def test_the_operators_token_still_reads_metrics(operator: Operator):
    assert operator.get("/metrics").status_code == 200


class TestMultiprocess:
    """Several server processes sharing PROMETHEUS_MULTIPROC_DIR (what `serve --workers N` sets
    up, app/telemetry/multiprocess.py prepare_multiprocess): a scrape of any one sums them all."""

    def test_a_scrape_of_one_process_counts_every_processs_requests(self, tmp_path):
        import httpx

        from tests.support.servers import Served, clean_env

        env = {**clean_env(tmp_path / "data"), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
               "FENCELINE_ADMIN_PASSWORD": "pw"}
        first = Served(tmp_path, env)
        try:
            first.wait_healthy()
            second = Served(tmp_path, env)
            try:
                second.wait_healthy()
                for server, count in ((first, 3), (second, 4)):
                    for _ in range(count):
                        assert httpx.get(f"{server.url}/v1/runs/d/r").status_code == 401
                scraped = httpx.get(f"{first.url}/metrics", auth=("admin", "pw"))
                assert scraped.status_code == 200
                requests = {s.labels["route"]: s.value for s in families(scraped.text)["fenceline_http_requests"]
                            if s.name == "fenceline_http_requests_total" and s.labels["status"] == "401"}
                assert requests["/v1/runs/{dag_id}/{run_id}"] == 7
                assert "fenceline_task_instances" in families(scraped.text)
            finally:
                second.stop()
        finally:
            first.stop()


def test_the_grafana_dashboard_graphs_metrics_the_server_exposes(operator):
    import json
    import re
    from pathlib import Path

    dashboard = json.loads((Path(__file__).resolve().parents[2] / "deploy/grafana/fenceline.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {re.sub(r"_(total|bucket|count|sum)$", "", name)
            for e in exprs for name in re.findall(r"\b(?:fenceline_\w+|execution_identity_conflicts_total)\b", e)}
    exposed = families(operator.get("/metrics").text)
    assert used and used <= exposed.keys(), used - exposed.keys()
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for shown in ("throughput", "latency", "task instances by state", "stale reports", "reaper marks", "claim waits"):
        assert shown in titles
