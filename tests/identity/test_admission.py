"""Admission: generations, predecessor compare-and-swap, idempotency, targets."""

import uuid

from tests.factories import admission_body, admit, kube_target


class TestAdmit:
    def test_first_admission_gets_generation_one_and_a_worker_token(self, client, operator):
        body = admit(client, operator, "etl-worker-3")
        assert body["generation"] == 1
        assert body["previous_execution_id"] is None
        assert body["seat"] == "etl-worker-3"
        uuid.UUID(body["execution_id"])
        assert body["worker_token"].count(".") == 2

    def test_replacement_names_the_predecessor_and_increments_generation(self, client, operator):
        first = admit(client, operator)
        second = admit(client, operator, previous=first["execution_id"])
        assert second["generation"] == 2
        assert second["previous_execution_id"] == first["execution_id"]

    def test_stale_predecessor_is_refused_naming_the_current_execution(self, client, operator):
        first = admit(client, operator)
        second = admit(client, operator, previous=first["execution_id"])
        resp = client.post("/v1/seats/etl-worker-1/executions",
                           json=admission_body(first["execution_id"]), headers=operator)
        assert resp.status_code == 409
        assert resp.headers["content-type"].startswith("application/problem+json")
        assert resp.json()["type"] == "stale-predecessor"
        assert resp.json()["current_execution_id"] == second["execution_id"]
        history = client.get("/v1/seats/etl-worker-1/executions", headers=operator).json()["items"]
        assert [e["generation"] for e in history] == [1, 2]

    def test_null_predecessor_on_a_seat_with_history_is_stale(self, client, operator):
        first = admit(client, operator)
        resp = client.post("/v1/seats/etl-worker-1/executions", json=admission_body(None), headers=operator)
        assert resp.status_code == 409
        assert resp.json()["current_execution_id"] == first["execution_id"]

    def test_predecessor_of_another_seat_is_stale(self, client, operator):
        other = admit(client, operator, "other-seat")
        resp = client.post("/v1/seats/etl-worker-1/executions",
                           json=admission_body(other["execution_id"]), headers=operator)
        assert resp.status_code == 409
        assert resp.json()["type"] == "stale-predecessor"

    def test_idempotency_key_replays_the_created_execution(self, client, operator):
        headers = {**operator, "Idempotency-Key": "abc-123"}
        first = client.post("/v1/seats/etl-worker-1/executions", json=admission_body(), headers=headers)
        again = client.post("/v1/seats/etl-worker-1/executions", json=admission_body(), headers=headers)
        assert first.status_code == 201 and again.status_code == 200
        assert again.json()["execution_id"] == first.json()["execution_id"]
        history = client.get("/v1/seats/etl-worker-1/executions", headers=operator).json()["items"]
        assert len(history) == 1

    def test_idempotency_key_with_a_different_body_is_refused(self, client, operator):
        headers = {**operator, "Idempotency-Key": "k"}
        client.post("/v1/seats/etl-worker-1/executions", json=admission_body(), headers=headers)
        resp = client.post("/v1/seats/etl-worker-1/executions", json=admission_body(swarm="x"), headers=headers)
        assert resp.status_code == 409
        assert resp.json()["type"] == "idempotency-key-reused"


class TestTargets:
    def test_kubernetes_needs_namespace_and_name(self, client, operator):
        resp = client.post("/v1/seats/s/executions", json=admission_body(backend="kubernetes",
                           target={"pod_name": "p"}), headers=operator)
        assert resp.status_code == 422
        assert "pod_namespace" in resp.text

    def test_kubernetes_without_target_is_422(self, client, operator):
        resp = client.post("/v1/seats/s/executions", json=admission_body(backend="kubernetes"), headers=operator)
        assert resp.status_code == 422

    def test_local_pid_must_be_positive(self, client, operator):
        resp = client.post("/v1/seats/s/executions", json=admission_body(target={"pid": 0}), headers=operator)
        assert resp.status_code == 422
        assert resp.json()["type"] == "validation-error"

    def test_local_target_rejects_pod_fields(self, client, operator):
        resp = client.post("/v1/seats/s/executions", json=admission_body(target={"pod_name": "p"}), headers=operator)
        assert resp.status_code == 422

    def test_local_without_target_is_admitted(self, client, operator):
        body = admit(client, operator, "s")
        assert body["runtime_backend"] == "local" and body["runtime_target"] is None

    def test_local_target_round_trips(self, client, operator):
        body = admit(client, operator, "s", target={"server_id": "host-1", "pid": 4242})
        assert body["runtime_target"] == {"server_id": "host-1", "pid": 4242}

    def test_unknown_backend_and_bad_seat_name_are_422(self, client, operator):
        assert client.post("/v1/seats/s/executions", json=admission_body(backend="docker"),
                           headers=operator).status_code == 422
        assert client.post("/v1/seats/bad%20name/executions", json=admission_body(),
                           headers=operator).status_code == 422

    def test_refused_input_changes_nothing(self, client, operator):
        client.post("/v1/seats/s/executions", json=admission_body(target={"pid": -1}), headers=operator)
        assert client.get("/v1/seats/s/executions", headers=operator).json() == {"items": []}
        assert client.get("/v1/seats/s", headers=operator).status_code == 404

    def test_admission_with_a_used_pod_uid_is_refused(self, client, operator):
        admit(client, operator, "a", backend="kubernetes", target=kube_target("uid-1"))
        resp = client.post("/v1/seats/b/executions", json=admission_body(backend="kubernetes",
                           target=kube_target("uid-1")), headers=operator)
        assert resp.status_code == 409
        assert resp.json()["type"] == "pod-uid-reused"
