"""The official Airflow 2.10 client reads fenceline unmodified (in its own virtual environment)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.airflow import scenario
from tests.airflow.scenario import DAG, RUN
from tests.support.api import ADMIN_PASSWORD, Operator

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-airflow2"
CLIENT = "apache-airflow-client==2.10.0"


@pytest.fixture(scope="session")
def airflow2_python() -> Path:
    """The second virtual environment's Python, with the 2.10 client (made once if missing;
    .ci/run makes it up front)."""
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", CLIENT], check=True)
    return python


def test_every_read_deserialises_in_the_2_10_client(live_server, airflow2_python):
    with live_server.client() as http:
        built = scenario.build(Operator(http))
    script = Path(__file__).with_name("v1_client.py")
    proc = subprocess.run([str(airflow2_python), str(script), live_server.url, "admin", ADMIN_PASSWORD, DAG, RUN],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ""})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
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
