"""The seat projection: its read, the plain writer, its drop, and the resume compare-and-swap."""

from tests.factories import admit, kube_target
from tests.identity.checks import refused

PLAIN = {"swarm": "etl", "role": "loader", "labels": {"team": "a"}}


def resume(client, operator, expected, seat="etl-worker-1", **fields):
    return client.put(f"/v1/seats/{seat}/resume", json={"expected_execution_id": expected, **fields},
                      headers=operator)


class TestReadSeat:
    def test_plain_record_plus_the_identity_of_the_latest_execution(self, client, operator):
        first = admit(client, operator, backend="kubernetes", target=kube_target("uid-1"), role="loader")
        second = admit(client, operator, previous=first["execution_id"], labels={"team": "b"})
        body = client.get("/v1/seats/etl-worker-1", headers=operator).json()
        assert body["seat"] == "etl-worker-1"
        assert (body["swarm"], body["role"], body["labels"]) == ("etl", None, {"team": "b"})
        assert (body["runtime_backend"], body["runtime_target"]) == ("local", None)
        assert (body["execution_id"], body["generation"]) == (second["execution_id"], 2)
        assert body["execution"] == {k: v for k, v in second.items() if k != "worker_token"}
        assert (body["resume_token"], body["last_message_id"], body["context_window"]) == (None, None, None)

    def test_a_plain_seat_has_no_execution(self, client, operator):
        client.put("/v1/seats/plain", json=PLAIN, headers=operator)
        body = client.get("/v1/seats/plain", headers=operator).json()
        assert (body["execution_id"], body["generation"], body["execution"]) == (None, 0, None)
        assert (body["swarm"], body["role"], body["labels"]) == ("etl", "loader", {"team": "a"})

    def test_unknown_seat_is_404(self, client, operator):
        resp = client.get("/v1/seats/nobody", headers=operator)
        assert resp.status_code == 404
        assert resp.json()["type"] == "seat-not-found"


class TestPlainWriter:
    def test_creates_then_replaces_a_default_identity_record(self, client, operator):
        assert client.put("/v1/seats/plain", json=PLAIN, headers=operator).status_code == 201
        resp = client.put("/v1/seats/plain", json={"swarm": "etl", "labels": {"team": "c"}}, headers=operator)
        assert resp.status_code == 200
        assert (resp.json()["role"], resp.json()["labels"]) == (None, {"team": "c"})

    def test_kubernetes_needs_admission(self, client, operator):
        refused(client, operator, lambda: client.put(
            "/v1/seats/plain", json={**PLAIN, "runtime_backend": "kubernetes", "runtime_target": kube_target()},
            headers=operator), "admission-required", seat="plain")

    def test_a_target_needs_admission(self, client, operator):
        refused(client, operator, lambda: client.put(
            "/v1/seats/plain", json={**PLAIN, "runtime_target": {"pid": 42}}, headers=operator),
            "admission-required", seat="plain")

    def test_a_name_with_history_needs_admission(self, client, operator):
        admit(client, operator)
        refused(client, operator, lambda: client.put("/v1/seats/etl-worker-1", json=PLAIN, headers=operator),
                "admission-required")

    def test_a_name_with_history_needs_admission_after_its_seat_was_dropped(self, client, operator):
        admit(client, operator)
        client.delete("/v1/seats/etl-worker-1", headers=operator)
        refused(client, operator, lambda: client.put("/v1/seats/etl-worker-1", json=PLAIN, headers=operator),
                "admission-required")

    def test_admission_takes_over_a_plain_seat(self, client, operator):
        client.put("/v1/seats/plain", json=PLAIN, headers=operator)
        execution = admit(client, operator, "plain", swarm="batch")
        body = client.get("/v1/seats/plain", headers=operator).json()
        assert (body["swarm"], body["execution_id"]) == ("batch", execution["execution_id"])


class TestDeleteSeat:
    def test_drops_the_projection_and_keeps_the_history(self, client, operator):
        first = admit(client, operator)
        admit(client, operator, previous=first["execution_id"])
        assert client.delete("/v1/seats/etl-worker-1", headers=operator).status_code == 204
        assert client.get("/v1/seats/etl-worker-1", headers=operator).status_code == 404
        history = client.get("/v1/seats/etl-worker-1/executions", headers=operator).json()["items"]
        assert [e["generation"] for e in history] == [1, 2]

    def test_unknown_seat_is_404(self, client, operator):
        assert client.delete("/v1/seats/nobody", headers=operator).status_code == 404

    def test_the_next_admission_continues_the_generations(self, client, operator):
        first = admit(client, operator)
        client.delete("/v1/seats/etl-worker-1", headers=operator)
        second = admit(client, operator, previous=first["execution_id"])
        assert second["generation"] == 2
        assert client.get("/v1/seats/etl-worker-1", headers=operator).json()["execution_id"] == second["execution_id"]


class TestResume:
    def test_writes_on_the_current_execution(self, client, operator):
        execution = admit(client, operator)
        resp = resume(client, operator, execution["execution_id"], resume_token="t1", last_message_id="m1",
                      context_window=4096)
        assert resp.status_code == 200
        body = client.get("/v1/seats/etl-worker-1", headers=operator).json()
        assert (body["resume_token"], body["last_message_id"], body["context_window"]) == ("t1", "m1", 4096)

    def test_writes_only_the_fields_given(self, client, operator):
        execution = admit(client, operator)
        resume(client, operator, execution["execution_id"], resume_token="t1", last_message_id="m1")
        body = resume(client, operator, execution["execution_id"], last_message_id="m2").json()
        assert (body["resume_token"], body["last_message_id"]) == ("t1", "m2")

    def test_a_rotated_execution_is_refused_and_the_token_untouched(self, client, operator):
        first = admit(client, operator)
        resume(client, operator, first["execution_id"], resume_token="t1")
        second = admit(client, operator, previous=first["execution_id"])
        problem = refused(client, operator, lambda: resume(client, operator, first["execution_id"], resume_token="t2"),
                          "execution-rotated")
        assert problem["current_execution_id"] == second["execution_id"]
        assert client.get("/v1/seats/etl-worker-1", headers=operator).json()["resume_token"] == "t1"

    def test_a_plain_seat_has_no_execution_to_expect(self, client, operator):
        client.put("/v1/seats/plain", json=PLAIN, headers=operator)
        refused(client, operator, lambda: resume(client, operator, "00000000-0000-0000-0000-000000000001", "plain",
                                                 resume_token="t"), "execution-rotated", seat="plain")

    def test_unknown_seat_is_404(self, client, operator):
        resp = resume(client, operator, "00000000-0000-0000-0000-000000000001", "nobody", resume_token="t")
        assert resp.status_code == 404

    def test_the_launcher_fields_cannot_be_written_here(self, client, operator):
        execution = admit(client, operator)
        resp = resume(client, operator, execution["execution_id"], current_execution_id=execution["execution_id"])
        assert resp.status_code == 422
        assert "current_execution_id" in resp.json()["detail"]
