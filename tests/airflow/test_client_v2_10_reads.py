"""The official 2.10 client against /api/v1: every filter it sends, the exact set each returns
over runs in mixed states (tests/support/airflow/mixed.py), and the reads tools expect (health,
version, a DAG, its details and tasks, a pool)."""

from app import __version__
from tests.support.airflow import mixed, scenario
from tests.support.airflow.mixed import SHOWN, keys, shown
from tests.support.api import Operator, Worker, task

ALL = set(SHOWN)
TIS = "TaskInstanceApi", "get_task_instances"


def build(live_server, builder=mixed.build) -> None:
    with live_server.client() as http:
        builder(Operator(http))


def test_task_instance_filters(live_server, v1_calls):
    build(live_server)
    calls = [[*TIS, ["~", "~"], filters] for filters in (
        {}, {"state": ["running"]}, {"state": ["failed"]}, {"state": ["none"]}, {"state": ["success", "queued"]},
        {"pool": ["gpus"]}, {"queue": ["default"]}, {"executor": ["CeleryExecutor"]}, {"limit": 3, "offset": 8})]
    calls.append([*TIS, ["etl", "r1"], {"state": ["success", "running"]}])
    (all_, running, failed, none, done, gpus, default, executor, page, r1) = v1_calls(calls)
    assert keys(all_["task_instances"]) == ALL
    assert keys(running["task_instances"]) == shown("running")
    assert keys(failed["task_instances"]) == shown("failed")  # infra_failed shows, and is found, as failed
    assert keys(none["task_instances"]) == shown(None)
    assert keys(done["task_instances"]) == shown("success") | shown("queued")
    gpu = {("etl", "r1", "transform"), ("report", "daily", "d")}
    assert keys(gpus["task_instances"]) == gpu and keys(default["task_instances"]) == ALL - gpu
    assert executor["task_instances"] == []
    assert len(page["task_instances"]) == 3 and page["total_entries"] == len(ALL)
    assert keys(r1["task_instances"]) == {("etl", "r1", "extract"), ("etl", "r1", "transform")}


def test_task_instance_date_ranges(live_server, v1_calls):
    build(live_server)
    (every,) = v1_calls([[*TIS, ["~", "~"], {}]])
    starts = sorted(t["start_date"] for t in every["task_instances"] if t["start_date"])
    cut = starts[len(starts) // 2]
    after, before = v1_calls([[*TIS, ["~", "~"], {"start_date_gte": cut}], [*TIS, ["~", "~"], {"start_date_lte": cut}]])
    at = {(t["dag_id"], t["dag_run_id"], t["task_id"]): t["start_date"] for t in every["task_instances"]}
    assert keys(after["task_instances"]) == {k for k, d in at.items() if d and d >= cut}
    assert keys(before["task_instances"]) == {k for k, d in at.items() if d and d <= cut}


def test_dag_run_and_dag_filters(live_server, v1_calls):
    build(live_server)
    success, failed, ordered, etl, paused, pattern = v1_calls([
        ["DAGRunApi", "get_dag_runs", ["~"], {"state": ["success"]}],
        ["DAGRunApi", "get_dag_runs", ["report"], {"state": ["failed"]}],
        ["DAGRunApi", "get_dag_runs", ["~"], {"order_by": "-dag_run_id", "limit": 2}],
        ["DAGRunApi", "get_dag_runs_batch", [{"__model__": "ListDagRunsForm", "dag_ids": ["etl"],
                                              "states": ["running"], "order_by": "dag_run_id"}], {}],
        ["DAGApi", "get_dags", [], {"paused": True}],
        ["DAGApi", "get_dags", [], {"dag_id_pattern": "EP", "order_by": "-dag_id"}],
    ])
    assert [r["dag_run_id"] for r in success["dag_runs"]] == ["r0"]
    assert [r["dag_run_id"] for r in failed["dag_runs"]] == ["weekly"]
    assert [r["dag_run_id"] for r in ordered["dag_runs"]] == ["weekly", "r2"] and ordered["total_entries"] == 5
    assert [r["dag_run_id"] for r in etl["dag_runs"]] == ["r1", "r2"]
    assert paused["dags"] == [] and [d["dag_id"] for d in pattern["dags"]] == ["report"]


def test_the_batch_read_of_task_instances(live_server, v1_calls):
    build(live_server)
    form = {"__model__": "ListTaskInstanceForm", "dag_ids": ["report"],
            "state": [{"__model__": "TaskState", "value": "failed"}]}
    (found,) = v1_calls([["TaskInstanceApi", "get_task_instances_batch", [form], {}]])
    assert keys(found["task_instances"]) == {("report", "daily", "a"), ("report", "daily", "c"),
                                             ("report", "weekly", "x")}


def test_tries_page_and_order(live_server, v1_calls):
    build(live_server, scenario.build)
    tries = "TaskInstanceApi", "get_task_instance_tries", [scenario.DAG, scenario.RUN, "extract"]
    down, first = v1_calls([[*tries, {"order_by": "-try_number"}], [*tries, {"limit": 1}]])
    assert [t["try_number"] for t in down["task_instances"]] == [2, 1]
    assert [t["try_number"] for t in first["task_instances"]] == [1] and first["total_entries"] == 2


def test_the_reads_tools_expect(live_server, v1_calls):
    with live_server.client() as http:
        operator = Operator(http)
        operator.create_run(task("extract", retries=2, retry_delay=90), task("fan", "extract", map_index=0),
                            task("fan", "extract", map_index=1), task("load", "fan", pool="default_pool"),
                            dag_id="etl", run_id="r1")
    health, version, dag, details, tasks, one, pool, no_dag, no_pool, no_task = v1_calls([
        ["MonitoringApi", "get_health", [], {}], ["MonitoringApi", "get_version", [], {}],
        ["DAGApi", "get_dag", ["etl"], {}], ["DAGApi", "get_dag_details", ["etl"], {}],
        ["DAGApi", "get_tasks", ["etl"], {}], ["DAGApi", "get_task", ["etl", "fan"], {}],
        ["PoolApi", "get_pool", ["default_pool"], {}], ["DAGApi", "get_dag", ["nope"], {}],
        ["PoolApi", "get_pool", ["nope"], {}], ["DAGApi", "get_task", ["etl", "nope"], {}]])
    assert health["metadatabase"]["status"] == "healthy" and health["scheduler"]["status"] == "healthy"
    assert version["version"] == __version__
    assert dag["dag_id"] == "etl" and dag["is_paused"] is False
    assert details["dag_id"] == "etl" and details["catchup"] is False and details["timezone"] == "UTC"
    assert [t["task_id"] for t in tasks["tasks"]] == ["extract", "fan", "load"]
    extract = tasks["tasks"][0]
    assert (extract["retries"], extract["retry_delay"]["seconds"], extract["downstream_task_ids"]) == (2, 90, ["fan"])
    assert one["is_mapped"] is True and one["downstream_task_ids"] == ["load"]
    assert pool["name"] == "default_pool" and pool["slots"] == 128 and pool["scheduled_slots"] == 1
    assert no_dag == no_pool == no_task == {"status": 404}


def test_the_other_date_ranges_and_dag_filters(live_server, v1_calls):
    build(live_server)
    runs, every = v1_calls([["DAGRunApi", "get_dag_runs", ["~"], {}], [*TIS, ["~", "~"], {}]])
    cut = runs["dag_runs"][3]["execution_date"]
    ended = {r["dag_run_id"] for r in runs["dag_runs"] if r["end_date"]}
    far = "2100-01-01T00:00:00+00:00"
    calls = [["DAGRunApi", "get_dag_runs", ["~"], f] for f in (
        {"execution_date_gte": cut}, {"start_date_lte": cut}, {"end_date_lte": far}, {"updated_at_gte": far})]
    calls += [[*TIS, ["~", "~"], f] for f in ({"execution_date_gte": far}, {"end_date_lte": far},
                                              {"updated_at_lte": far})]
    calls += [["DAGApi", "get_dags", [], f] for f in ({"tags": ["x"]}, {"only_active": False})]
    calls += [["PoolApi", "get_pools", [], {"order_by": "-slots"}]]
    (after, before, runs_ended, none_updated, tis_later, tis_ended, tis_updated, tagged, inactive,
     pools) = v1_calls(calls)
    assert [r["dag_run_id"] for r in after["dag_runs"]] == [r["dag_run_id"] for r in runs["dag_runs"][3:]]
    assert [r["dag_run_id"] for r in before["dag_runs"]] == [r["dag_run_id"] for r in runs["dag_runs"][:4]]
    assert {r["dag_run_id"] for r in runs_ended["dag_runs"]} == ended and none_updated["dag_runs"] == []
    assert tis_later["task_instances"] == [] and len(tis_updated["task_instances"]) == len(ALL)
    assert keys(tis_ended["task_instances"]) == keys(t for t in every["task_instances"] if t["end_date"])
    assert tagged["dags"] == [] and [d["dag_id"] for d in inactive["dags"]] == ["etl", "report"]
    assert [p["name"] for p in pools["pools"]] == ["default_pool", "gpus"]


def test_a_mapped_tasks_instances_and_an_unknown_state(live_server, v1_calls):
    with live_server.client() as http:
        operator = Operator(http)
        operator.create_run(task("fan", map_index=0), task("fan", map_index=1), task("one"), dag_id="etl", run_id="r1")
        Worker(operator, "seat-a").claim(10)
        for path in ("/api/v1/dags/~/dagRuns/~/taskInstances?state=nope", "/api/v1/dags/~/dagRuns?state=nope"):
            refused = operator.get(path)
            assert refused.status_code == 400 and refused.json()["detail"].startswith("'nope' is not one of ["), path
            assert refused.json()["detail"].endswith(" - 'state'")
    mapped, ordered, not_mapped = v1_calls([
        ["TaskInstanceApi", "get_mapped_task_instances", ["etl", "r1", "fan"], {}],
        ["TaskInstanceApi", "get_mapped_task_instances", ["etl", "r1", "fan"], {"order_by": "-map_index"}],
        ["TaskInstanceApi", "get_mapped_task_instances", ["etl", "r1", "one"], {}]])
    assert [(t["map_index"], t["executor"]) for t in mapped["task_instances"]] == [(0, "fenceline"), (1, "fenceline")]
    assert {t["hostname"] for t in mapped["task_instances"]} == {"seat-a"}
    assert [t["map_index"] for t in ordered["task_instances"]] == [1, 0]
    assert not_mapped == {"status": 404}
