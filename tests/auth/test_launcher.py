"""Launcher tokens: they admit and update executions, and can do nothing else an operator can."""

from tests.support.api import admission_body, bearer


class TestLauncherToken:
    def test_it_admits_updates_and_reads_executions(self, client, operator):
        token = bearer(operator.launcher_token())
        admitted = client.post("/v1/seats/w1/executions", json=admission_body(), headers=token)
        assert admitted.status_code == 201
        execution_id = admitted.json()["execution_id"]
        patched = client.patch(f"/v1/executions/{execution_id}", headers=token, json={
            "observation": {"phase": "Running", "observed_at": "2026-01-01T00:00:00Z"}})
        assert patched.status_code == 200
        assert client.get(f"/v1/executions/{execution_id}", headers=token).status_code == 200
        assert client.get("/v1/seats/w1/executions", headers=token).json()["items"][0]["execution_id"] == execution_id
        claimed = client.post("/v1/dispatch/claim", json={"limit": 1}, headers=bearer(admitted.json()["worker_token"]))
        assert claimed.status_code == 200

    def test_it_can_do_nothing_else_an_operator_can(self, client, operator):
        token = bearer(operator.launcher_token())
        for method, path in [("POST", "/v1/runs"), ("GET", "/v1/runs"), ("GET", "/v1/admin/snapshot"),
                             ("POST", "/v1/admin/reap"), ("GET", "/v1/occupants"), ("PUT", "/v1/seats/w1/resume"),
                             ("POST", "/v1/auth/launcher-tokens"), ("POST", "/v1/dispatch/claim"),
                             ("GET", "/api/v2/dags")]:
            resp = client.request(method, path, headers=token, json={})
            assert resp.status_code == 403, (method, path, resp.status_code)

    def test_only_an_operator_mints_one(self, client, operator):
        assert client.post("/v1/auth/launcher-tokens").status_code == 401
        worker = operator.admission("w1").json()
        assert client.post("/v1/auth/launcher-tokens", headers=bearer(worker["worker_token"])).status_code == 403
