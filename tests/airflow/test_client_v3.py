"""The official Airflow 3 client (apache-airflow-client 3.x) reads fenceline unmodified."""

import airflow_client.client as af
import pytest
from airflow_client.client.api.connection_api import ConnectionApi
from airflow_client.client.api.dag_api import DAGApi
from airflow_client.client.api.dag_run_api import DagRunApi
from airflow_client.client.api.monitor_api import MonitorApi
from airflow_client.client.api.pool_api import PoolApi
from airflow_client.client.api.task_api import TaskApi
from airflow_client.client.api.task_instance_api import TaskInstanceApi
from airflow_client.client.api.version_api import VersionApi
from airflow_client.client.api.x_com_api import XComApi

from app import __version__
from tests.support.airflow import scenario
from tests.support.airflow.scenario import DAG, RUN
from tests.support.api import Operator


@pytest.fixture
def built(live_server):
    with live_server.client() as http:
        operator = Operator(http)
        built = scenario.build(operator)
    config = af.Configuration(host=live_server.url, access_token=operator.token)
    with af.ApiClient(config) as api:
        yield built, api


def events(log) -> list[str]:
    """The messages of a log page (the client wraps the list in a oneOf model)."""
    return [m.event for m in log.content.actual_instance]


class TestReads:
    def test_dags_runs_and_task_instances_deserialise(self, built):
        _, api = built
        assert [d.dag_id for d in DAGApi(api).get_dags().dags] == [DAG]
        runs = DagRunApi(api).get_dag_runs(DAG)
        assert runs.total_entries == 1 and runs.dag_runs[0].dag_run_id == RUN
        assert DagRunApi(api).get_dag_run(DAG, RUN).state.value == "success"
        tis = TaskInstanceApi(api).get_task_instances(DAG, RUN)
        assert sorted((t.task_id, t.map_index) for t in tis.task_instances) == [("extract", -1), ("fan", 0), ("fan", 1)]
        extract = TaskInstanceApi(api).get_task_instance(DAG, RUN, "extract")
        assert (extract.try_number, extract.state.value) == (2, "success")
        assert TaskInstanceApi(api).get_mapped_task_instance(DAG, RUN, "fan", 1).map_index == 1

    def test_one_entry_per_try_however_many_epochs(self, built):
        scenario_, api = built
        tries = TaskInstanceApi(api).get_task_instance_tries(DAG, RUN, "extract")
        assert tries.total_entries == 2
        assert [(t.try_number, t.state.value) for t in tries.task_instances] == [(1, "failed"), (2, "success")]
        detail = TaskInstanceApi(api).get_task_instance_try_details(DAG, RUN, "extract", 1)
        assert detail.state.value == "failed" and detail.try_number == 1

    def test_mapped_tries(self, built):
        _, api = built
        tries = TaskInstanceApi(api).get_mapped_task_instance_tries(DAG, RUN, "fan", 0)
        assert [(t.try_number, t.map_index, t.state.value) for t in tries.task_instances] == [(1, 0, "success")]
        detail = TaskInstanceApi(api).get_mapped_task_instance_try_details(DAG, RUN, "fan", task_try_number=1,
                                                                           map_index=0)
        assert detail.map_index == 0 and detail.state.value == "success"
        by_query = TaskInstanceApi(api).get_task_instance_tries(DAG, RUN, "fan", map_index=1)
        assert [t.map_index for t in by_query.task_instances] == [1]

    def test_the_tasks_of_a_dag(self, built):
        _, api = built
        tasks = TaskApi(api).get_tasks(DAG)
        assert [(t.task_id, t.is_mapped, t.downstream_task_ids) for t in tasks.tasks] == [
            ("extract", False, ["fan"]), ("fan", True, [])] and tasks.total_entries == 2
        assert TaskApi(api).get_task(DAG, "extract").retries == 1
        assert [t.task_id for t in TaskApi(api).get_tasks(DAG, order_by="-task_id").tasks] == ["fan", "extract"]
        with pytest.raises(af.exceptions.NotFoundException):
            TaskApi(api).get_task(DAG, "nope")

    def test_a_mapped_tasks_instances_with_their_host_and_executor(self, built):
        _, api = built
        mapped = TaskInstanceApi(api).get_mapped_task_instances(DAG, RUN, "fan")
        assert [(t.map_index, t.hostname, t.executor) for t in mapped.task_instances] == [
            (0, "worker-1", "fenceline"), (1, "worker-1", "fenceline")] and mapped.total_entries == 2
        one = TaskInstanceApi(api).get_mapped_task_instances(DAG, RUN, "fan", map_index=[1], order_by=["-map_index"])
        assert [t.map_index for t in one.task_instances] == [1]
        for not_mapped in ("extract", "nope"):
            with pytest.raises(af.exceptions.NotFoundException):
                TaskInstanceApi(api).get_mapped_task_instances(DAG, RUN, not_mapped)

    def test_unknown_try_is_not_found(self, built):
        _, api = built
        with pytest.raises(af.exceptions.NotFoundException):
            TaskInstanceApi(api).get_task_instance_try_details(DAG, RUN, "extract", 3)


class TestLogs:
    def test_try_one_holds_its_three_epochs_in_order_behind_system_lines(self, built):
        built_, api = built
        log = TaskInstanceApi(api).get_log(DAG, RUN, "extract", 1, full_content=True)
        lines = events(log)
        system = [e for e in lines if e.startswith("::fenceline::")]
        assert len(system) == 3
        assert [e for e in lines if not e.startswith("::fenceline::")] == built_.lines_try1
        for line, epoch in zip(system, built_.epochs_try1, strict=True):
            assert f"epoch {epoch} " in line
        assert "evicted" in system[1] and "node_lost" in system[2]
        assert lines.index(system[1]) == lines.index(built_.lines_try1[0]) + 1
        assert log.continuation_token is None

    def test_following_tokens_page_through_a_finished_log(self, built):
        built_, api = built
        log = TaskInstanceApi(api).get_log(DAG, RUN, "extract", 2)
        assert events(log)[1:] == built_.lines_try2
        assert log.continuation_token is None

    def test_mapped_log(self, built):
        _, api = built
        log = TaskInstanceApi(api).get_log(DAG, RUN, "fan", 1, map_index=1)
        assert events(log)[-1] == "fan 1"

    def test_a_forged_token_is_400(self, built):
        _, api = built
        with pytest.raises(af.exceptions.BadRequestException):
            TaskInstanceApi(api).get_log(DAG, RUN, "extract", 1, token="forged.token.value")


class TestBeyondTries:
    """What the 3.x client reads of a server besides runs, tries and logs."""

    def test_version_and_health_are_read_without_a_token(self, live_server):
        with af.ApiClient(af.Configuration(host=live_server.url)) as api:
            assert VersionApi(api).get_version().version == __version__
            health = MonitorApi(api).get_health()
        assert health.metadatabase.status == "healthy" and health.scheduler.status == "healthy"

    def test_a_dag_and_its_details(self, built):
        _, api = built
        assert DAGApi(api).get_dag(DAG).dag_id == DAG
        details = DAGApi(api).get_dag_details(DAG)
        assert (details.dag_id, details.catchup, details.is_paused) == (DAG, False, False)
        with pytest.raises(af.exceptions.NotFoundException):
            DAGApi(api).get_dag("no-such-dag")

    def test_the_wildcard_lists_every_dags_runs(self, built):
        _, api = built
        runs = DagRunApi(api).get_dag_runs("~")
        assert [(r.dag_id, r.dag_run_id) for r in runs.dag_runs] == [(DAG, RUN)]
        tis = TaskInstanceApi(api).get_task_instances("~", "~")
        assert tis.total_entries == 3

    def test_the_default_pool(self, built):
        _, api = built
        pools = PoolApi(api).get_pools()
        assert [(p.name, p.slots, p.open_slots) for p in pools.pools] == [("default_pool", 128, 128)]


class TestRoutesFencelineDoesNotHave:
    def test_a_literal_segment_is_not_read_as_a_map_index(self, built):
        _, api = built
        with pytest.raises(af.exceptions.NotFoundException) as deps:
            TaskInstanceApi(api).get_task_instance_dependencies(DAG, RUN, "extract")
        assert "dependencies" in deps.value.body and "map_index" not in deps.value.body
        with pytest.raises(af.exceptions.NotFoundException) as xcoms:
            XComApi(api).get_xcom_entries(DAG, RUN, "extract")
        assert "XComs" in xcoms.value.body
        assert TaskInstanceApi(api).get_mapped_task_instance(DAG, RUN, "extract", -1).task_id == "extract"

    def test_absent_resources_say_so_in_each_versions_shape(self, built, live_server):
        _, api = built
        with pytest.raises(af.exceptions.NotFoundException) as connections:
            ConnectionApi(api).get_connections()
        assert "connections" in connections.value.data.detail.actual_instance
        with live_server.client() as http:
            operator = Operator(http)
            for path, word in (("/api/v2/variables/x", "variables"), ("/api/v2/backfills", "backfill"),
                               ("/api/v2/config", "settings"), ("/api/v2/plugins", "plugins"),
                               ("/api/v2/providers", "providers"), ("/api/v2/assets/events", "assets")):
                resp = operator.get(path)
                assert resp.status_code == 404 and set(resp.json()) == {"detail"}, path
                assert word in resp.json()["detail"], (path, resp.text)
            deleted = operator.delete(f"/api/v2/dags/{DAG}/dagRuns/{RUN}/taskInstances/extract/xcomEntries/k")
            assert deleted.status_code == 404
            v1 = operator.get(f"/api/v1/dags/{DAG}/dagRuns/{RUN}/taskInstances/extract/xcomEntries")
            assert v1.status_code == 404 and v1.headers["content-type"] == "application/problem+json"
            assert v1.json()["type"].endswith("Errors/NotFound") and "XComs" in v1.json()["detail"]
            other = operator.get("/api/v2/no-such-route")
            assert (other.status_code, set(other.json())) == (404, {"detail"})
