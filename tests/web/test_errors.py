"""Native errors are problem+json: unknown routes, wrong methods, and bad input naming the field."""

from tests.support.api import assert_problem


class TestProblems:
    def test_an_unknown_route_is_404(self, operator):
        body = assert_problem(operator.get("/v1/nothing-here"), 404, "not-found")
        assert "/v1/nothing-here" in body["detail"]

    def test_a_wrong_method_is_405(self, operator):
        assert_problem(operator.delete("/v1/occupants"), 405, "method-not-allowed")

    def test_a_405_names_every_method_served_at_the_path(self, operator):
        """GET and POST /v1/admin/snapshot are two routes: Allow names both."""
        resp = operator.request("OPTIONS", "/v1/admin/snapshot")
        assert_problem(resp, 405, "method-not-allowed")
        assert sorted(resp.headers["allow"].split(", ")) == ["GET", "POST"]

    def test_a_missing_field_is_422_naming_it(self, operator):
        resp = operator.post("/v1/seats/s/executions", json={"runtime_backend": "local"})
        body = assert_problem(resp, 422, "validation-error")
        assert "body.swarm" in body["detail"]
        assert body["errors"][0]["loc"] == ["body", "swarm"]

    def test_a_bad_target_member_is_422_naming_it(self, operator):
        resp = operator.admission("s", target={"pid": 0})
        assert "body.runtime_target.pid" in assert_problem(resp, 422, "validation-error")["detail"]

    def test_a_kubernetes_admission_without_target_is_422_naming_it(self, operator):
        resp = operator.admission("s", backend="kubernetes")
        assert "body.runtime_target" in assert_problem(resp, 422, "validation-error")["detail"]

    def test_malformed_json_is_422(self, operator):
        resp = operator.post("/v1/seats/s/executions", content=b"{not json",
                             headers={"content-type": "application/json"})
        assert_problem(resp, 422, "validation-error")
