"""Native errors are problem+json: unknown routes, wrong methods, and bad input naming the field."""

from tests.factories import admission_body


def assert_problem(resp, status, type):
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    body = resp.json()
    assert (body["status"], body["type"]) == (status, type)
    assert body["title"] and body["detail"]
    return body


class TestProblems:
    def test_an_unknown_route_is_404(self, client, operator):
        body = assert_problem(client.get("/v1/nothing-here", headers=operator), 404, "not-found")
        assert "/v1/nothing-here" in body["detail"]

    def test_a_wrong_method_is_405(self, client, operator):
        assert_problem(client.delete("/v1/occupants", headers=operator), 405, "method-not-allowed")

    def test_a_missing_field_is_422_naming_it(self, client, operator):
        resp = client.post("/v1/seats/s/executions", json={"runtime_backend": "local"}, headers=operator)
        body = assert_problem(resp, 422, "validation-error")
        assert "body.swarm" in body["detail"]
        assert body["errors"][0]["loc"] == ["body", "swarm"]

    def test_a_bad_target_member_is_422_naming_it(self, client, operator):
        resp = client.post("/v1/seats/s/executions", json=admission_body(target={"pid": 0}), headers=operator)
        assert "body.runtime_target.pid" in assert_problem(resp, 422, "validation-error")["detail"]

    def test_a_kubernetes_admission_without_target_is_422_naming_it(self, client, operator):
        resp = client.post("/v1/seats/s/executions", json=admission_body(backend="kubernetes"), headers=operator)
        assert "body.runtime_target" in assert_problem(resp, 422, "validation-error")["detail"]

    def test_malformed_json_is_422(self, client, operator):
        resp = client.post("/v1/seats/s/executions", content=b"{not json",
                           headers={**operator, "content-type": "application/json"})
        assert_problem(resp, 422, "validation-error")
