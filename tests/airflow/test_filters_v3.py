"""Every filter /api/v2 honours, driven through the official 3.x client against runs in mixed
states (tests/support/airflow/mixed.py): the exact set each returns, and the order order_by asks for."""

from datetime import timedelta

import airflow_client.client as af
import pytest
from airflow_client.client.api.dag_api import DAGApi
from airflow_client.client.api.dag_run_api import DagRunApi
from airflow_client.client.api.job_api import JobApi
from airflow_client.client.api.pool_api import PoolApi
from airflow_client.client.api.task_instance_api import TaskInstanceApi
from airflow_client.client.models.dag_runs_batch_body import DAGRunsBatchBody
from airflow_client.client.models.task_instances_batch_body import TaskInstancesBatchBody

from tests.support.airflow import mixed
from tests.support.airflow.mixed import SHOWN, keys, shown
from tests.support.api import Operator

ALL = set(SHOWN)


@pytest.fixture
def api(live_server):
    with live_server.client() as http:
        operator = Operator(http)
        mixed.build(operator)
    with af.ApiClient(af.Configuration(host=live_server.url, access_token=operator.token)) as client:
        yield client


def tis(api, dag_id="~", run_id="~", **filters) -> set:
    return keys(TaskInstanceApi(api).get_task_instances(dag_id, run_id, **filters).task_instances)


def every_ti(api) -> list:
    return TaskInstanceApi(api).get_task_instances("~", "~").task_instances


class TestTaskInstances:
    def test_state_is_the_state_the_answer_shows(self, api):
        assert tis(api, state=["running"]) == shown("running")
        assert tis(api, state=["failed"]) == shown("failed")  # infra_failed is shown, and found, as failed
        assert tis(api, state=["success", "queued"]) == shown("success") | shown("queued")
        assert tis(api, state=["none"]) == tis(api, state=["no_status"]) == shown(None)
        assert tis(api, state=["up_for_retry"]) == shown("up_for_retry")
        assert tis(api, state=["skipped"]) == set()
        both = {("etl", "r1", "extract"), ("etl", "r1", "transform")}
        assert tis(api, "etl", "r1", state=["success", "running"]) == both

    def test_task_id_and_display_name_patterns(self, api):
        assert tis(api, task_id="extract") == {("etl", "r1", "extract"), ("etl", "r2", "extract")}
        assert tis(api, task_display_name_pattern="TRANS") == {("etl", "r1", "transform")}  # case-insensitive
        assert tis(api, task_display_name_pattern="r_port") == {("etl", "r2", "report")}  # `_` is any one character
        assert tis(api, task_display_name_pattern="load|^x") == {("etl", "r1", "load")}  # `|` between alternatives
        assert tis(api, task_display_name_pattern="~") == ALL
        assert tis(api, task_display_name_prefix_pattern="ex") == {("etl", "r1", "extract"), ("etl", "r2", "extract")}
        assert tis(api, task_display_name_prefix_pattern="EX") == set()  # a prefix is case-sensitive
        assert tis(api, task_display_name_prefix_pattern="loa_") == {("etl", "r1", "load")}  # trailing `_` dropped

    def test_dag_and_run_patterns(self, api):
        assert tis(api, dag_id_pattern="repo") == {k for k in ALL if k[0] == "report"}
        assert tis(api, dag_id_prefix_pattern="etl") == {k for k in ALL if k[0] == "etl"}
        assert tis(api, run_id_pattern="r1|weekly") == {k for k in ALL if k[1] in ("r1", "weekly")}
        assert tis(api, run_id_prefix_pattern="da") == {k for k in ALL if k[1] == "daily"}

    def test_pool_and_queue(self, api):
        gpu = {("etl", "r1", "transform"), ("report", "daily", "d")}
        assert tis(api, pool=["gpus"]) == tis(api, queue=["gpu"]) == gpu
        assert tis(api, pool=["gpus", "default_pool"]) == ALL
        assert tis(api, pool_name_pattern="GPU") == tis(api, queue_name_prefix_pattern="gp") == gpu
        assert tis(api, queue_name_pattern="default") == tis(api, pool_name_prefix_pattern="default") == ALL - gpu

    def test_map_index_and_try_number(self, api):
        assert tis(api, map_index=[-1]) == ALL and tis(api, map_index=[0]) == set()
        assert tis(api, try_number=[1]) == ALL  # a try spent waiting for its retry is still the current one
        assert tis(api, try_number=[2]) == set()

    def test_fields_shown_null_match_nothing_but_everything(self, api):
        assert tis(api, executor=["LocalExecutor"]) == tis(api, operator=["BashOperator"]) == set()
        assert tis(api, operator_name_pattern="Bash") == tis(api, rendered_map_index_pattern="x") == set()
        assert tis(api, version_number=[1]) == set()
        assert tis(api, operator_name_pattern="~") == ALL

    @pytest.mark.parametrize("field", ["start_date", "end_date", "logical_date", "run_after"])
    def test_date_ranges_bound_the_dates_shown(self, api, field):
        answers = every_ti(api)
        dated = sorted({getattr(t, field) for t in answers if getattr(t, field)})
        cut = dated[len(dated) // 2]
        at = {(t.dag_id, t.dag_run_id, t.task_id): getattr(t, field) for t in answers}
        for op, keep in (("gte", lambda d: d >= cut), ("gt", lambda d: d > cut), ("lte", lambda d: d <= cut),
                         ("lt", lambda d: d < cut)):
            expected = {k for k, d in at.items() if d is not None and keep(d)}
            assert tis(api, **{f"{field}_{op}": cut}) == expected, (field, op)
        assert tis(api, **{f"{field}_gte": cut, f"{field}_lt": cut}) == set()

    def test_updated_at_range(self, api):
        later = max(t.end_date or t.start_date or t.logical_date for t in every_ti(api)) + timedelta(minutes=1)
        assert tis(api, updated_at_lte=later) == ALL and tis(api, updated_at_gt=later) == set()

    def test_order_by_a_shown_field_and_descending(self, api):
        by_start = TaskInstanceApi(api).get_task_instances("~", "~", order_by=["start_date"]).task_instances
        starts = [t.start_date for t in by_start]
        assert starts == sorted(s for s in starts if s) + [None] * starts.count(None)  # nulls last
        down = TaskInstanceApi(api).get_task_instances("~", "~", order_by=["-start_date"]).task_instances
        assert [t.start_date for t in down] == [None] * starts.count(None) + sorted(
            (s for s in starts if s), reverse=True)
        by_state = TaskInstanceApi(api).get_task_instances("etl", "r1", order_by=["-state"])
        assert [t.task_id for t in by_state.task_instances] == ["load", "extract", "transform"]  # null first, desc

    def test_limit_and_offset(self, api):
        page = TaskInstanceApi(api).get_task_instances("~", "~", order_by=["id"], limit=4, offset=2)
        ids = sorted(t.id for t in every_ti(api))
        assert [t.id for t in page.task_instances] == ids[2:6] and page.total_entries == len(ALL)
        empty = TaskInstanceApi(api).get_task_instances("~", "~", limit=0)
        assert empty.task_instances == [] and empty.total_entries == len(ALL)
        assert len(TaskInstanceApi(api).get_task_instances("~", "~", limit=100_000).task_instances) == len(ALL)

    def test_the_batch_read_takes_the_same_filters(self, api):
        def batch(**body) -> set:
            answer = TaskInstanceApi(api).get_task_instances_batch("~", "~", TaskInstancesBatchBody(**body))
            return keys(answer.task_instances)

        assert batch() == ALL
        assert batch(dag_ids=["report"], state=["failed"]) == {("report", "daily", "a"), ("report", "daily", "c"),
                                                               ("report", "weekly", "x")}
        assert batch(dag_run_ids=["r1"], task_ids=["load", "transform"]) == {("etl", "r1", "load"),
                                                                             ("etl", "r1", "transform")}
        assert batch(state=[None]) == shown(None)
        assert batch(pool=["gpus"], queue=["gpu"]) == {("etl", "r1", "transform"), ("report", "daily", "d")}
        paged = TaskInstanceApi(api).get_task_instances_batch(
            "~", "~", TaskInstancesBatchBody(order_by="-run_after", page_limit=2, page_offset=1))
        assert len(paged.task_instances) == 2 and paged.total_entries == len(ALL)


class TestDagRuns:
    def runs(self, api, dag_id="~", **filters) -> list:
        return [(r.dag_id, r.dag_run_id) for r in DagRunApi(api).get_dag_runs(dag_id, **filters).dag_runs]

    def test_state(self, api):
        assert self.runs(api, state=["success"]) == [("etl", "r0")]
        assert self.runs(api, state=["failed", "success"]) == [("etl", "r0"), ("report", "weekly")]
        assert set(self.runs(api, "etl", state=["running"])) == {("etl", "r1"), ("etl", "r2")}

    def test_patterns_and_run_type(self, api):
        assert self.runs(api, run_id_pattern="r") == [("etl", "r0"), ("etl", "r1"), ("etl", "r2")]
        assert self.runs(api, dag_id_prefix_pattern="rep") == [("report", "daily"), ("report", "weekly")]
        assert len(self.runs(api, run_type=["manual"])) == 5 and self.runs(api, run_type=["scheduled"]) == []
        assert self.runs(api, triggering_user_name_pattern="admin") == []

    def test_order_by_and_ranges(self, api):
        assert self.runs(api, order_by=["-dag_run_id"]) == [("report", "weekly"), ("etl", "r2"), ("etl", "r1"),
                                                            ("etl", "r0"), ("report", "daily")]
        runs = DagRunApi(api).get_dag_runs("~").dag_runs
        cut = runs[2].start_date
        assert self.runs(api, start_date_gte=cut) == [(r.dag_id, r.dag_run_id) for r in runs[2:]]
        assert self.runs(api, logical_date_lt=cut) == [(r.dag_id, r.dag_run_id) for r in runs[:2]]
        ended = {(r.dag_id, r.dag_run_id) for r in runs if r.end_date}
        assert set(self.runs(api, end_date_lte=runs[-1].start_date + timedelta(days=1))) == ended

    def test_the_batch_read(self, api):
        body = DAGRunsBatchBody(dag_ids=["etl"], states=["running"], order_by="-run_after")
        answer = DagRunApi(api).get_list_dag_runs_batch("~", body)
        assert [r.dag_run_id for r in answer.dag_runs] == ["r2", "r1"]


class TestDagsPoolsJobs:
    def test_dags(self, api):
        dags = DAGApi(api)
        assert [d.dag_id for d in dags.get_dags(dag_id_pattern="EP").dags] == ["report"]
        assert [d.dag_id for d in dags.get_dags(order_by=["-dag_id"]).dags] == ["report", "etl"]
        assert dags.get_dags(paused=True).dags == [] and len(dags.get_dags(paused=False).dags) == 2
        assert dags.get_dags(tags=["nightly"]).dags == [] and dags.get_dags(owners=["ops"]).dags == []
        assert dags.get_dags(limit=1, offset=1).total_entries == 2

    def test_pools(self, api):
        pools = PoolApi(api)
        gpus = pools.get_pool("gpus")
        assert (gpus.name, gpus.slots, gpus.running_slots, gpus.scheduled_slots) == ("gpus", 4, 1, 1)
        with pytest.raises(af.exceptions.NotFoundException):
            pools.get_pool("nope")
        assert [p.name for p in pools.get_pools(pool_name_pattern="gpu").pools] == ["gpus"]
        assert [p.name for p in pools.get_pools(order_by=["-name"]).pools] == ["gpus", "default_pool"]

    def test_jobs_are_none_however_filtered(self, api):
        assert JobApi(api).get_jobs(job_type="SchedulerJob", is_alive=True).total_entries == 0
        with pytest.raises(af.exceptions.BadRequestException):
            JobApi(api).get_jobs(order_by=["nonsense"])


RUN_KEYS = [(dag, run) for dag, run, _ in mixed.RUNS]


@pytest.mark.parametrize(("filters", "expected"), [
    ({"dag_id_pattern": "ETL"}, [k for k in RUN_KEYS if k[0] == "etl"]),
    ({"run_id_prefix_pattern": "r"}, [k for k in RUN_KEYS if k[1].startswith("r")]),
    ({"run_id_prefix_pattern": "R"}, []),
    ({"run_type": ["manual", "backfill"]}, RUN_KEYS),
    ({"dag_version": [1]}, []), ({"bundle_version": "v1"}, []), ({"partition_key_pattern": "p"}, []),
    ({"partition_key_prefix_pattern": "~"}, RUN_KEYS), ({"consuming_asset_pattern": "s3"}, []),
    ({"triggering_user_name_prefix_pattern": "ad"}, []),
    ({"partition_date_gte": "2000-01-01T00:00:00Z"}, []),
])
def test_every_other_run_filter(api, filters, expected):
    answer = DagRunApi(api).get_dag_runs("~", **filters)
    assert [(r.dag_id, r.dag_run_id) for r in answer.dag_runs] == expected


def test_run_after_and_updated_at_ranges(api):
    runs = DagRunApi(api).get_dag_runs("~").dag_runs
    cut = runs[3].run_after
    assert [r.dag_run_id for r in DagRunApi(api).get_dag_runs("~", run_after_gt=cut).dag_runs] == ["r2"]
    later = runs[-1].run_after + timedelta(hours=1)
    assert DagRunApi(api).get_dag_runs("~", updated_at_gte=later).dag_runs == []
    assert len(DagRunApi(api).get_dag_runs("~", updated_at_lt=later).dag_runs) == len(runs)


@pytest.mark.parametrize(("filters", "expected"), [
    ({"dag_id_prefix_pattern": "rep"}, ["report"]), ({"dag_display_name_pattern": "T|rep"}, ["etl", "report"]),
    ({"dag_display_name_prefix_pattern": "e"}, ["etl"]), ({"exclude_stale": False}, ["etl", "report"]),
    ({"has_import_errors": True}, []), ({"has_import_errors": False}, ["etl", "report"]),
    ({"is_favorite": True}, []), ({"has_asset_schedule": True}, []), ({"asset_dependency": "s3"}, []),
    ({"bundle_name": "dags-folder"}, []), ({"bundle_version": "1"}, []), ({"timetable_type": ["cron"]}, []),
    ({"tags": ["a"], "tags_match_mode": "all"}, []), ({"tags_match_mode": "any"}, ["etl", "report"]),
    ({"order_by": ["-start_date"]}, ["report", "etl"]), ({"order_by": ["next_dagrun"]}, ["etl", "report"]),
])
def test_every_other_dag_filter(api, filters, expected):
    assert [d.dag_id for d in DAGApi(api).get_dags(**filters).dags] == expected


def test_the_remaining_task_instance_patterns(api):
    assert tis(api, operator_name_prefix_pattern="Bash") == tis(api, rendered_map_index_prefix_pattern="0") == set()
    assert tis(api, queue_name_pattern="gp_") == {("etl", "r1", "transform"), ("report", "daily", "d")}
    assert [p.name for p in PoolApi(api).get_pools(pool_name_prefix_pattern="default").pools] == ["default_pool"]
