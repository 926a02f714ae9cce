"""The seat projection: its read, the plain writer, its drop, and the resume compare-and-swap."""

from tests.support.api import kube_target
from tests.support.identity import refused

PLAIN = {"swarm": "etl", "role": "loader", "labels": {"team": "a"}}


def resume(operator, expected, seat="etl-worker-1", **fields):
    return operator.put(f"/v1/seats/{seat}/resume", json={"expected_execution_id": expected, **fields})


class TestReadSeat:
    def test_plain_record_plus_the_identity_of_the_latest_execution(self, operator):
        first = operator.admit(backend="kubernetes", target=kube_target("uid-1"), role="loader")
        second = operator.admit(previous=first["execution_id"], labels={"team": "b"})
        body = operator.get("/v1/seats/etl-worker-1").json()
        assert body["seat"] == "etl-worker-1"
        assert (body["swarm"], body["role"], body["labels"]) == ("etl", None, {"team": "b"})
        assert (body["runtime_backend"], body["runtime_target"]) == ("local", None)
        assert (body["execution_id"], body["generation"]) == (second["execution_id"], 2)
        assert body["execution"] == {k: v for k, v in second.items() if k != "worker_token"}
        assert (body["resume_token"], body["last_message_id"], body["context_window"]) == (None, None, None)

    def test_a_plain_seat_has_no_execution(self, operator):
        operator.put("/v1/seats/plain", json=PLAIN)
        body = operator.get("/v1/seats/plain").json()
        assert (body["execution_id"], body["generation"], body["execution"]) == (None, 0, None)
        assert (body["swarm"], body["role"], body["labels"]) == ("etl", "loader", {"team": "a"})

    def test_unknown_seat_is_404(self, operator):
        resp = operator.get("/v1/seats/nobody")
        assert resp.status_code == 404
        assert resp.json()["type"] == "seat-not-found"


class TestPlainWriter:
    def test_creates_then_replaces_a_default_identity_record(self, operator):
        assert operator.put("/v1/seats/plain", json=PLAIN).status_code == 201
        resp = operator.put("/v1/seats/plain", json={"swarm": "etl", "labels": {"team": "c"}})
        assert resp.status_code == 200
        assert (resp.json()["role"], resp.json()["labels"]) == (None, {"team": "c"})

    def test_kubernetes_needs_admission(self, operator):
        refused(operator, lambda: operator.put(
            "/v1/seats/plain", json={**PLAIN, "runtime_backend": "kubernetes", "runtime_target": kube_target()}),
            "admission-required", seat="plain")

    def test_a_target_needs_admission(self, operator):
        refused(operator, lambda: operator.put(
            "/v1/seats/plain", json={**PLAIN, "runtime_target": {"pid": 42}}),
            "admission-required", seat="plain")

    def test_a_name_with_history_needs_admission(self, operator):
        operator.admit()
        refused(operator, lambda: operator.put("/v1/seats/etl-worker-1", json=PLAIN), "admission-required")

    def test_a_name_with_history_needs_admission_after_its_seat_was_dropped(self, operator):
        operator.admit()
        operator.delete("/v1/seats/etl-worker-1")
        refused(operator, lambda: operator.put("/v1/seats/etl-worker-1", json=PLAIN), "admission-required")

    def test_admission_takes_over_a_plain_seat(self, operator):
        operator.put("/v1/seats/plain", json=PLAIN)
        execution = operator.admit("plain", swarm="batch")
        body = operator.get("/v1/seats/plain").json()
        assert (body["swarm"], body["execution_id"]) == ("batch", execution["execution_id"])


class TestDeleteSeat:
    def test_drops_the_projection_and_keeps_the_history(self, operator):
        first = operator.admit()
        operator.admit(previous=first["execution_id"])
        assert operator.delete("/v1/seats/etl-worker-1").status_code == 204
        assert operator.get("/v1/seats/etl-worker-1").status_code == 404
        history = operator.get("/v1/seats/etl-worker-1/executions").json()["items"]
        assert [e["generation"] for e in history] == [1, 2]

    def test_unknown_seat_is_404(self, operator):
        assert operator.delete("/v1/seats/nobody").status_code == 404

    def test_the_next_admission_continues_the_generations(self, operator):
        first = operator.admit()
        operator.delete("/v1/seats/etl-worker-1")
        second = operator.admit(previous=first["execution_id"])
        assert second["generation"] == 2
        assert operator.get("/v1/seats/etl-worker-1").json()["execution_id"] == second["execution_id"]


class TestResume:
    def test_writes_on_the_current_execution(self, operator):
        execution = operator.admit()
        resp = resume(operator, execution["execution_id"], resume_token="t1", last_message_id="m1",
                      context_window=4096)
        assert resp.status_code == 200
        body = operator.get("/v1/seats/etl-worker-1").json()
        assert (body["resume_token"], body["last_message_id"], body["context_window"]) == ("t1", "m1", 4096)

    def test_writes_only_the_fields_given(self, operator):
        execution = operator.admit()
        resume(operator, execution["execution_id"], resume_token="t1", last_message_id="m1")
        body = resume(operator, execution["execution_id"], last_message_id="m2").json()
        assert (body["resume_token"], body["last_message_id"]) == ("t1", "m2")

    def test_a_rotated_execution_is_refused_and_the_token_untouched(self, operator):
        first = operator.admit()
        resume(operator, first["execution_id"], resume_token="t1")
        second = operator.admit(previous=first["execution_id"])
        problem = refused(operator, lambda: resume(operator, first["execution_id"], resume_token="t2"),
                          "execution-rotated")
        assert problem["current_execution_id"] == second["execution_id"]
        assert operator.get("/v1/seats/etl-worker-1").json()["resume_token"] == "t1"

    def test_a_plain_seat_has_no_execution_to_expect(self, operator):
        operator.put("/v1/seats/plain", json=PLAIN)
        refused(operator, lambda: resume(operator, "00000000-0000-0000-0000-000000000001", "plain", resume_token="t"),
                "execution-rotated", seat="plain")

    def test_unknown_seat_is_404(self, operator):
        resp = resume(operator, "00000000-0000-0000-0000-000000000001", "nobody", resume_token="t")
        assert resp.status_code == 404

    def test_the_launcher_fields_cannot_be_written_here(self, operator):
        execution = operator.admit()
        resp = resume(operator, execution["execution_id"], current_execution_id=execution["execution_id"])
        assert resp.status_code == 422
        assert "current_execution_id" in resp.json()["detail"]
