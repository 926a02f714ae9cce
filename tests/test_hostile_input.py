"""Input no column can hold is a 422 problem, never a 500, and changes nothing."""

import json

from tests.api import Worker, admission_body

LONE_SURROGATE = '"\\ud800"'  # valid JSON, not valid Unicode


def post_raw(client, path, body: str, headers):
    return client.post(path, content=body, headers={**headers, "content-type": "application/json"})


class TestText:
    def test_a_lone_surrogate_password_is_422(self, client):
        resp = post_raw(client, "/auth/token", f'{{"username": "admin", "password": {LONE_SURROGATE}}}', {})
        assert resp.status_code == 422
        assert resp.headers["content-type"].startswith("application/problem+json")

    def test_nul_and_surrogates_in_stored_text_are_422_and_admit_nothing(self, client, operator):
        for bad in ('"a\\u0000b"', LONE_SURROGATE):
            body = json.dumps(admission_body()).replace('"etl"', bad)
            resp = post_raw(client, "/v1/seats/s1/executions", body, operator.headers)
            assert resp.status_code == 422, resp.text
        assert operator.get("/v1/seats/s1/executions").json() == {"items": []}

    def test_a_lone_surrogate_in_a_log_append_is_422(self, client, operator):
        operator.create_run()
        attempt = Worker(operator).claim_one()
        resp = post_raw(client, "/v1/attempts/logs", f'{{"offset": 0, "content": {LONE_SURROGATE}}}', attempt.headers)
        assert resp.status_code == 422


class TestNumbers:
    def test_huge_paging_numbers_are_422(self, operator):
        assert operator.get("/v1/runs", params={"offset": 10**23}).status_code == 422
        assert operator.get("/api/v2/dags", params={"limit": 10**23}).status_code == 422

    def test_a_huge_map_index_is_a_clean_answer(self, operator):
        operator.create_run()
        resp = operator.get(f"/api/v2/dags/dag/dagRuns/run/taskInstances/t/{10**23}")
        assert resp.status_code in (404, 422)

    def test_a_huge_exit_code_is_422(self, operator):
        execution = operator.admission("s").json()
        resp = operator.patch(f"/v1/executions/{execution['execution_id']}", json={
            "observation": {"phase": "Failed", "exit_code": 10**30, "observed_at": "2026-01-01T00:00:00Z"}})
        assert resp.status_code == 422
        assert operator.get(f"/v1/executions/{execution['execution_id']}").json()["observation"] is None


class TestObservationReason:
    def test_an_outcome_reason_longer_than_an_attempt_reason_is_422(self, operator):
        run = operator.create_run()
        attempt = Worker(operator).claim_one()
        attempt.report("running")
        resp = operator.post("/v1/observations", json={
            "ti_id": attempt.ti_id, "try_number": 1, "attempt_epoch": attempt.epoch, "phase": "Failed",
            "reason": "x" * 100, "outcome": "failed"})
        assert resp.status_code == 422
        ti = operator.get(f"/v1/task-instances/{run['task_instances'][0]['ti_id']}").json()
        assert ti["state"] == "running"


class TestNul:
    def test_a_nul_in_the_path_or_query_is_422_on_both_databases(self, operator):
        assert operator.get("/v1/runs", params={"dag_id": "a\x00b"}).status_code == 422
        assert operator.get("/v1/runs/a%00b/r").status_code == 422

    def test_a_nul_in_task_output_is_kept_in_the_log(self, operator):
        operator.create_run()
        resp = Worker(operator).claim_one().send_log(0, "before\x00after\n")
        assert resp.json() == {"size": 13}
        ti = operator.get("/v1/runs/dag/run").json()["task_instances"][0]["ti_id"]
        assert operator.get(f"/v1/task-instances/{ti}/tries/1/log").text.endswith("before\x00after\n")
