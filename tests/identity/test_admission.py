"""Admission: generations, predecessor compare-and-swap, idempotency, targets."""

import uuid

from tests.support.api import admission_body, assert_problem, kube_target
from tests.support.identity import refused


class TestAdmit:
    def test_first_admission_gets_generation_one_and_a_worker_token(self, operator):
        body = operator.admit("etl-worker-3")
        assert body["generation"] == 1
        assert body["previous_execution_id"] is None
        assert body["seat"] == "etl-worker-3"
        uuid.UUID(body["execution_id"])
        assert body["worker_token"].count(".") == 2

    def test_replacement_names_the_predecessor_and_increments_generation(self, operator):
        first = operator.admit()
        second = operator.admit(previous=first["execution_id"])
        assert second["generation"] == 2
        assert second["previous_execution_id"] == first["execution_id"]

    def test_stale_predecessor_is_refused_naming_the_current_execution(self, operator):
        first = operator.admit()
        second = operator.admit(previous=first["execution_id"])
        problem = assert_problem(operator.admission(previous=first["execution_id"]), 409, "stale-predecessor")
        assert problem["current_execution_id"] == second["execution_id"]
        history = operator.get("/v1/seats/etl-worker-1/executions").json()["items"]
        assert [e["generation"] for e in history] == [1, 2]

    def test_null_predecessor_on_a_seat_with_history_is_stale(self, operator):
        first = operator.admit()
        resp = operator.admission(previous=None)
        assert resp.status_code == 409
        assert resp.json()["current_execution_id"] == first["execution_id"]

    def test_predecessor_of_another_seat_is_stale(self, operator):
        other = operator.admit("other-seat")
        resp = operator.admission(previous=other["execution_id"])
        assert resp.status_code == 409
        assert resp.json()["type"] == "stale-predecessor"

    def test_idempotency_key_replays_the_created_execution(self, operator):
        key = {"Idempotency-Key": "abc-123"}
        first = operator.post("/v1/seats/etl-worker-1/executions", json=admission_body(), headers=key)
        again = operator.post("/v1/seats/etl-worker-1/executions", json=admission_body(), headers=key)
        assert first.status_code == 201 and again.status_code == 200
        assert again.json()["execution_id"] == first.json()["execution_id"]
        history = operator.get("/v1/seats/etl-worker-1/executions").json()["items"]
        assert len(history) == 1

    def test_idempotency_key_with_a_different_body_is_refused_and_counted(self, operator):
        key = {"Idempotency-Key": "k"}
        operator.post("/v1/seats/etl-worker-1/executions", json=admission_body(), headers=key)
        refused(operator, lambda: operator.post("/v1/seats/etl-worker-1/executions", json=admission_body(swarm="x"),
                                                headers=key), "idempotency-key-reused", swarm="x")


class TestTargets:
    def test_kubernetes_needs_namespace_and_name(self, operator):
        resp = operator.admission("s", backend="kubernetes", target={"pod_name": "p"})
        assert resp.status_code == 422
        assert "pod_namespace" in resp.text

    def test_kubernetes_without_target_is_422(self, operator):
        resp = operator.admission("s", backend="kubernetes")
        assert resp.status_code == 422

    def test_local_pid_must_be_positive(self, operator):
        resp = operator.admission("s", target={"pid": 0})
        assert resp.status_code == 422
        assert resp.json()["type"] == "validation-error"

    def test_local_target_rejects_pod_fields(self, operator):
        resp = operator.admission("s", target={"pod_name": "p"})
        assert resp.status_code == 422

    def test_local_without_target_is_admitted(self, operator):
        body = operator.admit("s")
        assert body["runtime_backend"] == "local" and body["runtime_target"] is None

    def test_local_target_round_trips(self, operator):
        body = operator.admit("s", target={"server_id": "host-1", "pid": 4242})
        assert body["runtime_target"] == {"server_id": "host-1", "pid": 4242}

    def test_unknown_backend_and_bad_seat_name_are_422(self, operator):
        assert operator.admission("s", backend="docker").status_code == 422
        assert operator.admission("bad%20name").status_code == 422

    def test_refused_input_changes_nothing(self, operator):
        operator.admission("s", target={"pid": -1})
        assert operator.get("/v1/seats/s/executions").json() == {"items": []}
        assert operator.get("/v1/seats/s").status_code == 404

    def test_admission_with_a_used_pod_uid_is_refused(self, operator):
        operator.admit("a", backend="kubernetes", target=kube_target("uid-1"))
        resp = operator.admission("b", backend="kubernetes", target=kube_target("uid-1"))
        assert resp.status_code == 409
        assert resp.json()["type"] == "pod-uid-reused"
