"""Export and restore: every generation and every bound pod UID survive a drop and a restore."""

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.migrate import upgrade
from tests.conftest import app_settings as settings_for
from tests.conftest import login
from tests.databases import throwaway_database
from tests.factories import admission_body, admit, kube_target

FORMAT = "fenceline-snapshot/1"
SEAT_ROW = {
    "name": "restored", "swarm": "etl", "role": None, "labels": {}, "current_execution_id": None,
    "resume_token": None, "last_message_id": None, "context_window": None,
    "created_at": "2026-01-01T00:00:00+00:00", "updated_at": "2026-01-01T00:00:00+00:00",
}


@pytest.fixture
def fresh_client(is_postgres, tmp_path):
    """A client of a second installation on a new, migrated, empty database."""
    with throwaway_database("postgresql" if is_postgres else "sqlite", tmp_path) as url:
        upgrade(url)
        with TestClient(create_app(settings_for(url))) as client:
            yield client


def three_generations(client, operator):
    """etl-worker-1 at generation 3 (the first bound to pod uid-1), with its projection dropped."""
    first = admit(client, operator, backend="kubernetes", target=kube_target("uid-1"))
    second = admit(client, operator, previous=first["execution_id"])
    third = admit(client, operator, previous=second["execution_id"])
    client.put("/v1/seats/etl-worker-1/resume", headers=operator,
               json={"expected_execution_id": third["execution_id"], "resume_token": "t3"})
    client.patch(f"/v1/executions/{third['execution_id']}", headers=operator, json={"observation": {
        "phase": "Running", "observed_at": "2026-01-01T00:00:00.123456+00:00"}})
    assert client.delete("/v1/seats/etl-worker-1", headers=operator).status_code == 204
    client.put("/v1/seats/plain", json={"swarm": "etl", "labels": {"team": "a"}}, headers=operator)
    return first, second, third


def restore(client, headers, document):
    return client.post("/v1/admin/snapshot", json=document, headers=headers)


class TestExport:
    def test_one_document_of_every_table_but_the_installation_secrets(self, client, operator):
        three_generations(client, operator)
        document = client.get("/v1/admin/snapshot", headers=operator).json()
        assert document["format"] == FORMAT
        assert sorted(e["generation"] for e in document["tables"]["executions"]) == [1, 2, 3]
        assert [s["name"] for s in document["tables"]["seats"]] == ["plain"]
        assert "installation_secrets" not in document["tables"]


class TestRestore:
    def test_export_restore_export_is_identical(self, client, operator, fresh_client):
        three_generations(client, operator)
        exported = client.get("/v1/admin/snapshot", headers=operator).json()
        headers = login(fresh_client)
        resp = restore(fresh_client, headers, exported)
        assert resp.status_code == 201, resp.text
        assert resp.json()["restored"]["executions"] == 3
        assert fresh_client.get("/v1/admin/snapshot", headers=headers).json() == exported

    def test_a_restored_system_keeps_its_generations_and_pod_uids(self, client, operator, fresh_client):
        first, second, third = three_generations(client, operator)
        headers = login(fresh_client)
        restore(fresh_client, headers, client.get("/v1/admin/snapshot", headers=operator).json())
        history = fresh_client.get("/v1/seats/etl-worker-1/executions", headers=headers).json()["items"]
        assert [e["execution_id"] for e in history] == [e["execution_id"] for e in (first, second, third)]
        assert fresh_client.get("/v1/seats/etl-worker-1", headers=headers).status_code == 404
        stale = fresh_client.post(
            "/v1/seats/etl-worker-1/executions", json=admission_body(second["execution_id"]), headers=headers)
        assert (stale.status_code, stale.json()["type"]) == (409, "stale-predecessor")
        assert admit(fresh_client, headers, previous=third["execution_id"])["generation"] == 4
        reused = fresh_client.post("/v1/seats/another/executions", headers=headers, json=admission_body(
            backend="kubernetes", target=kube_target("uid-1")))
        assert (reused.status_code, reused.json()["type"]) == (409, "pod-uid-reused")

    def test_into_a_database_with_data_is_409_and_changes_nothing(self, client, operator):
        three_generations(client, operator)
        exported = client.get("/v1/admin/snapshot", headers=operator).json()
        resp = restore(client, operator, exported)
        assert (resp.status_code, resp.json()["type"]) == (409, "database-not-empty")
        assert client.get("/v1/admin/snapshot", headers=operator).json() == exported

    def test_a_minimal_document_restores(self, client, operator):
        resp = restore(client, operator, {"format": FORMAT, "tables": {"seats": [SEAT_ROW]}})
        assert resp.status_code == 201, resp.text
        assert client.get("/v1/seats/restored", headers=operator).json()["swarm"] == "etl"

    @pytest.mark.parametrize("document, named", [
        ({"format": "other/1", "tables": {}}, FORMAT),
        ({"format": FORMAT, "tables": []}, FORMAT),
        ({"format": FORMAT, "tables": {"nope": []}}, "nope"),
        ({"format": FORMAT, "tables": {"seats": "rows"}}, "seats"),
        ({"format": FORMAT, "tables": {"seats": [{**SEAT_ROW, "bogus": 1}]}}, "bogus"),
        ({"format": FORMAT, "tables": {"seats": [{**SEAT_ROW, "current_execution_id": "x"}]}}, "seats"),
        ({"format": FORMAT, "tables": {"seats": [{**SEAT_ROW, "created_at": "2026-01-01T00:00:00"}]}}, "created_at"),
        ({"format": FORMAT, "tables": {"seats": [{**SEAT_ROW, "context_window": "big"}]}}, "context_window"),
        ({"format": FORMAT, "tables": {"seats": [{**SEAT_ROW, "swarm": None}]}}, "seats"),
        ({"format": FORMAT, "tables": {"seats": [SEAT_ROW, SEAT_ROW]}}, "seats"),
    ], ids=["format", "tables", "table", "rows", "column", "uuid", "naive-time", "type", "null", "duplicate"])
    def test_a_malformed_document_is_422_and_restores_nothing(self, client, operator, document, named):
        resp = restore(client, operator, document)
        assert resp.status_code == 422, resp.text
        assert resp.headers["content-type"].startswith("application/problem+json")
        assert resp.json()["type"] == "invalid-snapshot"
        assert named in resp.json()["detail"]
        tables = client.get("/v1/admin/snapshot", headers=operator).json()["tables"]
        assert all(rows == [] for rows in tables.values())

    def test_a_document_that_is_not_an_object_is_422(self, client, operator):
        resp = restore(client, operator, [FORMAT])
        assert (resp.status_code, resp.json()["type"]) == (422, "validation-error")
