"""Export and restore: every generation and every bound pod UID survive a drop and a restore."""

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.ops.migrate import upgrade
from tests.support.api import Operator, Worker, assert_problem, kube_target, task
from tests.support.databases import throwaway_database
from tests.support.settings import app_settings as settings_for

FORMAT = "fenceline-snapshot/1"
SEAT_ROW = {
    "name": "restored", "swarm": "etl", "role": None, "labels": {}, "current_execution_id": None,
    "resume_token": None, "last_message_id": None, "context_window": None,
    "created_at": "2026-01-01T00:00:00+00:00", "updated_at": "2026-01-01T00:00:00+00:00",
}

SEEDED_POOL = {"name": "default_pool", "slots": 128, "description": "Default pool"}


@pytest.fixture
def fresh_client(is_postgres, tmp_path):
    """A client of a second installation on a new, migrated, empty database."""
    with throwaway_database("postgresql" if is_postgres else "sqlite", tmp_path) as url:
        upgrade(url)
        with TestClient(create_app(settings_for(url))) as client:
            yield client


def three_generations(operator):
    """etl-worker-1 at generation 3 (the first bound to pod uid-1), with its projection dropped."""
    first = operator.admit(backend="kubernetes", target=kube_target("uid-1"))
    second = operator.admit(previous=first["execution_id"])
    third = operator.admit(previous=second["execution_id"])
    operator.put("/v1/seats/etl-worker-1/resume",
                 json={"expected_execution_id": third["execution_id"], "resume_token": "t3"})
    operator.patch(f"/v1/executions/{third['execution_id']}", json={"observation": {
        "phase": "Running", "observed_at": "2026-01-01T00:00:00.123456+00:00"}})
    assert operator.delete("/v1/seats/etl-worker-1").status_code == 204
    operator.put("/v1/seats/plain", json={"swarm": "etl", "labels": {"team": "a"}})
    return first, second, third


def as_migrated(tables):
    """Whether the exported tables hold only what the migrations seed: the default pool."""
    return tables.pop("pools") == [SEEDED_POOL] and all(rows == [] for rows in tables.values())


def restore(operator, document):
    return operator.post("/v1/admin/snapshot", json=document)


class TestExport:
    def test_one_document_of_every_table_but_the_installation_secrets(self, operator):
        three_generations(operator)
        document = operator.get("/v1/admin/snapshot").json()
        assert document["format"] == FORMAT
        assert sorted(e["generation"] for e in document["tables"]["executions"]) == [1, 2, 3]
        assert [s["name"] for s in document["tables"]["seats"]] == ["plain"]
        assert "installation_secrets" not in document["tables"]


class TestRestore:
    def test_export_restore_export_is_identical(self, operator, fresh_client):
        three_generations(operator)
        exported = operator.get("/v1/admin/snapshot").json()
        fresh = Operator(fresh_client)
        resp = restore(fresh, exported)
        assert resp.status_code == 201, resp.text
        assert resp.json()["restored"]["executions"] == 3
        assert fresh.get("/v1/admin/snapshot").json() == exported

    def test_pools_and_tenant_caps_travel(self, operator, fresh_client):
        operator.post("/v1/pools", json={"name": "gpus", "slots": 4, "description": "the GPU nodes"})
        operator.patch("/v1/pools/default_pool", json={"slots": 16})
        operator.put("/v1/tenants/acme", json={"max_running": 3})
        body = {"dag_id": "dag", "run_id": "run", "tenant_id": "acme",
                "tasks": [task("a", queue="gpu", pool="gpus", pool_slots=2, priority_weight=5)]}
        assert operator.post("/v1/runs", json=body).status_code == 201
        Worker(operator).claim(1, ["gpu"])  # the tenant's turn is recorded too
        exported = operator.get("/v1/admin/snapshot").json()
        fresh = Operator(fresh_client)
        assert restore(fresh, exported).status_code == 201
        assert fresh.get("/v1/admin/snapshot").json() == exported
        assert [(p["name"], p["slots"], p["occupied_slots"]) for p in fresh.get("/v1/pools").json()["items"]] == [
            ("default_pool", 16, 0), ("gpus", 4, 2)]
        assert fresh.get("/v1/tenants/acme").json() == {"tenant_id": "acme", "max_running": 3, "queued": 1,
                                                        "running": 0}

    def test_a_restored_system_keeps_its_generations_and_pod_uids(self, operator, fresh_client):
        first, second, third = three_generations(operator)
        fresh = Operator(fresh_client)
        restore(fresh, operator.get("/v1/admin/snapshot").json())
        history = fresh.get("/v1/seats/etl-worker-1/executions").json()["items"]
        assert [e["execution_id"] for e in history] == [e["execution_id"] for e in (first, second, third)]
        assert fresh.get("/v1/seats/etl-worker-1").status_code == 404
        stale = fresh.admission("etl-worker-1", second["execution_id"])
        assert (stale.status_code, stale.json()["type"]) == (409, "stale-predecessor")
        assert fresh.admit(previous=third["execution_id"])["generation"] == 4
        reused = fresh.admission("another", backend="kubernetes", target=kube_target("uid-1"))
        assert (reused.status_code, reused.json()["type"]) == (409, "pod-uid-reused")

    def test_into_a_database_with_data_is_409_and_changes_nothing(self, operator):
        three_generations(operator)
        exported = operator.get("/v1/admin/snapshot").json()
        resp = restore(operator, exported)
        assert (resp.status_code, resp.json()["type"]) == (409, "database-not-empty")
        assert operator.get("/v1/admin/snapshot").json() == exported

    def test_a_minimal_document_restores(self, operator):
        resp = restore(operator, {"format": FORMAT, "tables": {"seats": [SEAT_ROW]}})
        assert resp.status_code == 201, resp.text
        assert operator.get("/v1/seats/restored").json()["swarm"] == "etl"

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
    def test_a_malformed_document_is_422_and_restores_nothing(self, operator, document, named):
        assert named in assert_problem(restore(operator, document), 422, "invalid-snapshot")["detail"]
        assert as_migrated(operator.get("/v1/admin/snapshot").json()["tables"])

    def test_a_document_that_is_not_an_object_is_422(self, operator):
        resp = restore(operator, [FORMAT])
        assert (resp.status_code, resp.json()["type"]) == (422, "validation-error")


class TestRestoreHoldsRowsToTheApisRules:
    def test_a_pool_name_or_size_the_api_refuses_is_named(self, operator, fresh_client):
        operator.post("/v1/pools", json={"name": "gpus", "slots": 4})
        document = operator.get("/v1/admin/snapshot").json()
        document["tables"]["pools"][1].update(name="../gpus", slots=-1)
        problem = assert_problem(restore(Operator(fresh_client), document), 422, "invalid-snapshot")
        assert "pools[1].name" in problem["detail"] and "pools[1].slots" in problem["detail"]

    @pytest.mark.parametrize("bad", ["../../x", "/abs", "ok/sub", "a\\..\\b", "a\x00b"],
                             ids=["dotdot", "absolute", "nested", "backslash", "nul"])
    def test_an_identifier_the_api_refuses_refuses_the_whole_document(self, operator, fresh_client, bad):
        operator.create_run(task("a"), task("b", "a"))
        document = operator.get("/v1/admin/snapshot").json()
        tables = document["tables"]
        tables["task_instances"][1]["task_id"] = bad
        tables["dag_runs"][0]["run_id"] = bad
        fresh = Operator(fresh_client)
        problem = assert_problem(restore(fresh, document), 422, "invalid-snapshot")
        assert "task_instances[1].task_id" in problem["detail"] and "dag_runs[0].run_id" in problem["detail"]
        assert as_migrated(fresh.get("/v1/admin/snapshot").json()["tables"])

    def test_a_seat_name_and_a_conf_the_api_refuses_are_named(self, operator, fresh_client):
        operator.create_run(task("a"))
        operator.admit("etl-worker-1")
        document = operator.get("/v1/admin/snapshot").json()
        tables = document["tables"]
        tables["executions"][0]["seat"] = "../seat"
        conf = {}
        for _ in range(40):
            conf = {"k": conf}
        tables["dag_runs"][0]["conf"] = conf
        problem = assert_problem(restore(Operator(fresh_client), document), 422, "invalid-snapshot")
        assert "executions[0].seat" in problem["detail"] and "dag_runs[0].conf" in problem["detail"]


class TestRestoreHoldsEveryRowToTheWriteSchemas:
    """Issue 30, item 6: rows the API would never have written (a payload that is no payload, a
    kind or a state outside its set, labels that are no labels) are refused, named, and change
    nothing; restored before, each answered 500 on every later read or claim."""

    @pytest.mark.parametrize("table, row, column, value", [
        ("task_instances", 0, "payload", "echo hi"),
        ("task_instances", 0, "payload", ["echo", "hi"]),
        ("task_instances", 0, "payload", {"command": "echo hi"}),
        ("task_instances", 0, "last_failure_kind", "weird"),
        ("task_instances", 0, "state", "limbo"),
        ("task_instances", 0, "priority_weight", 10**12),
        ("task_instances", 0, "try_number", -1),
        ("dag_runs", 0, "state", "half-done"),
        ("seats", 0, "labels", ["x"]),
        ("seats", 0, "labels", {"team": 7}),
        ("executions", 0, "labels", "x"),
        ("task_attempts", 0, "state", "lost"),
    ], ids=["payload-string", "payload-list", "payload-command-string", "failure-kind", "ti-state",
            "priority-past-bounds", "negative-try", "run-state", "labels-list", "label-not-text",
            "execution-labels", "attempt-state"])
    def test_a_row_the_api_would_not_write_is_named_and_nothing_restored(self, operator, fresh_client, table, row,
                                                                           column, value):
        operator.create_run(task("a"))
        operator.put("/v1/seats/plain", json={"swarm": "etl", "labels": {"team": "a"}})
        Worker(operator).claim_one()
        document = operator.get("/v1/admin/snapshot").json()
        document["tables"][table][row][column] = value
        fresh = Operator(fresh_client)
        problem = assert_problem(restore(fresh, document), 422, "invalid-snapshot")
        assert f"{table}[{row}].{column}" in problem["detail"]
        assert as_migrated(fresh.get("/v1/admin/snapshot").json()["tables"])
        assert Worker(fresh).claim_response().status_code == 200
