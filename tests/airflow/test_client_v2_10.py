"""The official Airflow 2.10 client reads fenceline unmodified (in its own virtual environment)."""

from tests.support.airflow import run_in_airflow2, scenario
from tests.support.airflow.scenario import DAG, RUN
from tests.support.api import ADMIN_PASSWORD, Operator


def test_every_read_deserialises_in_the_2_10_client(live_server, airflow2_python):
    with live_server.client() as http:
        built = scenario.build(Operator(http))
    out = run_in_airflow2(airflow2_python, "v1_client.py", live_server.url, "admin", ADMIN_PASSWORD, DAG, RUN)
    assert out["dags"] == [DAG] and out["runs"] == [RUN] and out["run_state"] == "success"
    assert out["task_instances"] == [["extract", -1], ["fan", 0], ["fan", 1]]
    assert out["extract"] == [2, "success"] and out["mapped"] == 1
    assert out["tries"] == [[1, "failed"], [2, "success"]]
    assert out["try_1"] == "failed"
    assert out["mapped_tries"] == [[0, "success"]] and out["mapped_try"] == "success"
    lines = out["log_1"].splitlines()
    assert [line for line in lines if not line.startswith("::fenceline::")] == built.lines_try1
    assert sum(line.startswith("::fenceline::") for line in lines) == 3
    assert out["log_token_is_string"] and out["log_after_end"] == ""
    assert out["missing_status"] == 404
