"""Export and restore: every generation and every bound pod UID survive a drop and a restore."""

import uuid

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.ops.migrate import upgrade
from tests.support.api import Operator, Worker, assert_problem, kube_target, task
from tests.support.databases import empty_tables, throwaway_database
from tests.support.settings import app_settings as settings_for

FORMAT = "fenceline-snapshot/1"
SEAT_ROW = {
    "name": "restored", "swarm": "etl", "role": None, "labels": {}, "current_execution_id": None,
    "resume_token": None, "last_message_id": None, "context_window": None,
    "created_at": "2026-01-01T00:00:00+00:00", "updated_at": "2026-01-01T00:00:00+00:00",
}

SEEDED_POOL = {"name": "default_pool", "slots": 128, "description": "Default pool"}


@pytest.fixture(scope="module")
def second_installation(db_url, tmp_path_factory):
    """The app of a second installation, on a second migrated database of the same backend."""
    backend = "postgresql" if db_url.startswith("postgresql") else "sqlite"
    with throwaway_database(backend, tmp_path_factory.mktemp("second")) as url:
        upgrade(url)
        app = create_app(settings_for(url))
        yield app
        app.state.engine.dispose()


@pytest.fixture
def fresh_client(second_installation):
    """A client of the second installation, whose database is as migrated: emptied after each
    test, as the first one is."""
    try:
        with TestClient(second_installation) as client:
            yield client
    finally:
        empty_tables(second_installation.state.engine)


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


def _at(rows, **match):
    """The index of the one row of `rows` that has every value of `match`."""
    [n] = [n for n, row in enumerate(rows) if all(row[k] == v for k, v in match.items())]
    return n


def _attempt_of(tables, task_id, epoch):
    """The index of task `task_id`'s attempt record at `epoch`."""
    ti_id = tables["task_instances"][_at(tables["task_instances"], task_id=task_id)]["id"]
    return _at(tables["task_attempts"], task_instance_id=ti_id, attempt_epoch=epoch)


def _ti_epoch_below_its_attempt(tables):
    """The issue's case: a claim of b would open the record of epoch 1 again, and collide."""
    tables["task_instances"][_at(tables["task_instances"], task_id="b")]["attempt_epoch"] = 0
    return f"task_attempts[{_attempt_of(tables, 'b', 1)}].attempt_epoch"


def _ti_try_below_its_attempt(tables):
    n = _attempt_of(tables, "b", 1)
    tables["task_attempts"][n]["try_number"] = 2
    return f"task_attempts[{n}].try_number"


def _epoch_recorded_twice(tables):
    """a's first try says it ran at epoch 3, as its second did."""
    first, second = _attempt_of(tables, "a", 1), _attempt_of(tables, "a", 3)
    tables["task_attempts"][first]["attempt_epoch"] = 3
    return f"task_attempts[{max(first, second)}].attempt_epoch"


def _unknown(table, column, match=None):
    """The row of `table` (matching `match`, else the first) names an id the snapshot lacks."""
    def mutate(tables):
        n = _at(tables[table], **match) if match else 0
        tables[table][n][column] = str(uuid.uuid4())
        return f"{table}[{n}].{column}"
    return mutate


def _named_run(column, value):
    def mutate(tables):
        n = _at(tables["task_instances"], task_id="b")
        tables["task_instances"][n][column] = value
        return f"task_instances[{n}].{column}"
    return mutate


def _history_above_its_ti(tables):
    tables["task_instance_history"][0]["attempt_epoch"] = 7
    return "task_instance_history[0].attempt_epoch"


def _predecessor_of_another_seat(tables):
    n = _at(tables["executions"], seat="etl-worker-1", generation=2)
    tables["executions"][n]["previous_execution_id"] = tables["executions"][
        _at(tables["executions"], seat="worker-1")]["execution_id"]
    return f"executions[{n}].previous_execution_id"


def _predecessor_not_older(tables):
    n = _at(tables["executions"], seat="etl-worker-1", generation=2)
    tables["executions"][n]["generation"] = 0
    return f"executions[{n}].generation"


def _seat_on_another_seats_execution(tables):
    n = _at(tables["seats"], name="worker-1")
    tables["seats"][n]["current_execution_id"] = tables["executions"][
        _at(tables["executions"], seat="etl-worker-1", generation=1)]["execution_id"]
    return f"seats[{n}].current_execution_id"


def _log_removal_of_no_run(tables):
    tables["log_removals"] = [{"dag_run_id": str(uuid.uuid4()), "run_ended_at": "2026-01-01T00:00:00+00:00",
                               "removed_at": "2026-01-01T00:00:00+00:00"}]
    return "log_removals[0].dag_run_id"


class TestRestoreRefusesRowsThatContradictEachOther:
    """Issue 43, item 6 (contract 1.7): each row fits the API's rules, but together they are a
    state no running system could have written. Restored before, the first one answered 201,
    and then every claim of its queue 409."""

    @pytest.fixture
    def document(self, operator):
        """A run of a, b (b after a) where a's first try succeeded on worker-1, a was cleared
        (try 2, epoch 2) and claimed again with b (a's attempts at epochs 1 and 3, b's at 1),
        and seat etl-worker-1 at generation 2."""
        operator.create_run(task("a"), task("b", "a"))
        worker = Worker(operator)
        first = worker.claim_one()
        first.report("running")
        first.report("success")
        assert operator.post(f"/v1/task-instances/{first.ti_id}/clear").status_code == 200
        assert len(worker.claim()) == 2
        operator.admit(previous=operator.admit()["execution_id"])
        return operator.get("/v1/admin/snapshot").json()

    @pytest.mark.parametrize("contradict", [
        _ti_epoch_below_its_attempt, _ti_try_below_its_attempt, _epoch_recorded_twice,
        _unknown("task_attempts", "task_instance_id"), _unknown("task_attempts", "execution_id"),
        _unknown("task_instances", "execution_id", {"task_id": "a"}),
        _unknown("task_instances", "dag_run_id", {"task_id": "b"}),
        _named_run("run_id", "another-run"), _named_run("tenant_id", "acme"),
        _named_run("upstream_task_ids", ["ghost"]), _history_above_its_ti,
        _unknown("task_instance_history", "task_instance_id"), _unknown("task_instance_history", "execution_id"),
        _unknown("executions", "previous_execution_id", {"generation": 2}),
        _unknown("executions", "superseded_by", {"generation": 1, "seat": "etl-worker-1"}),
        _predecessor_of_another_seat, _predecessor_not_older, _unknown("seats", "current_execution_id"),
        _seat_on_another_seats_execution, _log_removal_of_no_run,
    ], ids=["ti-epoch-below-attempt", "ti-try-below-attempt", "epoch-twice", "attempt-of-no-ti",
            "attempt-of-no-execution", "ti-of-no-execution", "ti-of-no-run", "ti-names-another-run",
            "ti-of-another-tenant", "upstream-not-in-run", "history-above-ti", "history-of-no-ti",
            "history-of-no-execution", "predecessor-missing", "successor-missing", "predecessor-of-another-seat",
            "generation-not-above-predecessor", "seat-on-no-execution", "seat-on-another-seats-execution",
            "log-removal-of-no-run"])
    def test_the_row_is_named_and_nothing_restored(self, document, fresh_client, contradict):
        named = contradict(document["tables"])
        fresh = Operator(fresh_client)
        problem = assert_problem(restore(fresh, document), 422, "invalid-snapshot")
        assert f"Rows contradict each other: {named}" in problem["detail"]
        assert problem["rows"] == [r for r in problem["rows"] if r.startswith(named)]
        assert as_migrated(fresh.get("/v1/admin/snapshot").json()["tables"])

    def test_every_contradiction_is_named_in_one_answer(self, document, fresh_client):
        named = [_ti_epoch_below_its_attempt(document["tables"]), _unknown("seats", "current_execution_id")(
            document["tables"]), _log_removal_of_no_run(document["tables"])]
        document["tables"]["pools"][0]["slots"] = -1  # and a row that breaks the API's rules
        problem = assert_problem(restore(Operator(fresh_client), document), 422, "invalid-snapshot")
        assert [r.split(":")[0] for r in problem["rows"]] == ["pools[0].slots", *named]

    def test_the_document_as_exported_restores_and_its_tasks_are_claimed(self, document, fresh_client):
        fresh = Operator(fresh_client)
        assert restore(fresh, document).status_code == 201
        tis = document["tables"]["task_instances"]
        assert fresh.post(f"/v1/task-instances/{tis[_at(tis, task_id='a')]['id']}/clear").status_code == 200
        assert [a.task_id for a in Worker(fresh, "another").claim()] == ["a"]
