"""Airflow's own CLI, airflowctl 0.1.5, run as a subprocess against a live server, as an
Airflow user would run it (docs/airflow-compat.md has the table of every command)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app import __version__
from tests.support.airflow import mixed, scenario
from tests.support.airflow.scenario import DAG, RUN
from tests.support.api import ADMIN_PASSWORD, Operator

AIRFLOWCTL = str(Path(sys.executable).with_name("airflowctl"))


class Ctl:
    """airflowctl with its own AIRFLOW_HOME; debug mode keeps the token in a file there
    instead of a system keyring (this machine has none)."""

    def __init__(self, home: Path, url: str) -> None:
        self.url = url
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_", "FENCELINE_"))}
        self.env.update(AIRFLOW_HOME=str(home), AIRFLOW_CLI_DEBUG_MODE="true", AIRFLOW_CLI_API_RETRIES="1",
                        COLUMNS="200")

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([AIRFLOWCTL, *args], env=self.env, capture_output=True, text=True, timeout=60)

    def ok(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, f"airflowctl {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def json(self, *args: str) -> list:
        """The records a command printed (as a JSON list: airflowctl's default output)."""
        return json.loads(self.ok(*args))

    def one(self, *args: str) -> dict:
        (record,) = self.json(*args)
        return record


@pytest.fixture(scope="module")
def ctl_home(shared_server, tmp_path_factory):
    """An AIRFLOW_HOME whose airflowctl logged in to the module's server, once: every command is
    a process that takes a second or so to start."""
    home = tmp_path_factory.mktemp("airflowctl")
    out = Ctl(home, shared_server.url).ok("auth", "login", "--api-url", shared_server.url, "--username", "admin",
                                          "--password", ADMIN_PASSWORD)
    assert "Login successful" in out
    return home


@pytest.fixture
def ctl(live_server, ctl_home):
    with live_server.client() as http:
        scenario.build(Operator(http))
    return Ctl(ctl_home, live_server.url)


def test_a_wrong_password_is_refused_with_airflows_words(live_server, tmp_path):
    done = Ctl(tmp_path, live_server.url).run("auth", "login", "--api-url", live_server.url, "--username", "admin",
                                               "--password", "wrong")
    assert done.returncode == 1
    assert "Invalid credentials" in done.stdout


def test_version_remote(ctl):
    assert f"'version': '{__version__}'" in ctl.ok("version", "--remote")


def test_dags_list_and_get(ctl):
    assert [d["dag_id"] for d in ctl.json("dags", "list")] == [DAG]
    dag = ctl.one("dags", "get", DAG)
    assert dag["dag_id"] == DAG and dag["is_paused"] == "False"
    assert ctl.one("dags", "get-details", DAG)["catchup"] == "False"


def test_dagrun_list_without_dag_id_or_limit_sees_every_run(ctl):
    for args in ((), ("--dag-id", DAG), ("--dag-id", DAG, "--limit", "5")):
        runs = ctl.one("dagrun", "list", *args)["dag_runs"]
        assert [(r["dag_id"], r["dag_run_id"], r["state"]) for r in runs] == [(DAG, RUN, "success")], args


def test_dagrun_get(ctl):
    run = ctl.one("dagrun", "get", DAG, RUN)
    assert (run["dag_run_id"], run["state"]) == (RUN, "success")


def test_pools_and_jobs(ctl):
    assert [p["name"] for p in ctl.json("pools", "list")] == ["default_pool"]
    assert ctl.json("jobs", "list") == []


def test_a_write_fenceline_does_not_take_is_refused_with_the_reason(ctl):
    for args in (("dags", "trigger", DAG), ("dags", "pause", DAG)):
        done = ctl.run(*args)
        assert done.returncode == 1, args
        assert "POST /v1/runs" in done.stdout and "Traceback" not in done.stdout + done.stderr, args


@pytest.fixture
def mixed_ctl(live_server, ctl_home):
    """airflowctl logged in to a server with runs in mixed states (tests/support/airflow/mixed.py)."""
    with live_server.client() as http:
        mixed.build(Operator(http))
    return Ctl(ctl_home, live_server.url)


def test_dagrun_list_filters_by_state(mixed_ctl):
    for state in ("success", "failed", "running"):
        runs = mixed_ctl.one("dagrun", "list", "--state", state)["dag_runs"]
        expected = [(dag, run) for dag, run, run_state in mixed.RUNS if run_state == state]
        assert sorted((r["dag_id"], r["dag_run_id"]) for r in runs) == sorted(expected), state
        assert {r["state"] for r in runs} == {state}


def test_pools_get(mixed_ctl):
    pool = mixed_ctl.one("pools", "get", "gpus")
    assert (pool["name"], pool["slots"], pool["running_slots"]) == ("gpus", "4", "1")


def test_xcom_list_is_not_found_and_says_why(mixed_ctl):
    done = mixed_ctl.run("xcom", "list", "etl", "r1", "extract")
    assert done.returncode == 1, done.stdout
    assert "XComs" in done.stdout and "map_index" not in done.stdout + done.stderr


def test_a_headless_login_needs_no_keyring(live_server, tmp_path):
    """The README's login for a machine without a keyring, run as the README has it: a token
    from fenceline's login held in AIRFLOW_CLI_TOKEN, and `auth login --skip-keyring` to store
    only the URL."""
    with live_server.client() as http:
        scenario.build(Operator(http))
    ctl = Ctl(tmp_path, live_server.url)
    del ctl.env["AIRFLOW_CLI_DEBUG_MODE"]
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    export = re.search(r'^export AIRFLOW_CLI_TOKEN=.*?\)"$', readme, re.MULTILINE | re.DOTALL).group(0)
    export = export.replace("http://127.0.0.1:8000", live_server.url).replace("<password>", ADMIN_PASSWORD)
    token = subprocess.run(["bash", "-c", f'{export}\nprintf %s "$AIRFLOW_CLI_TOKEN"'], capture_output=True,
                           text=True, check=True, timeout=60).stdout
    assert token.count(".") == 2, token  # a JWT, not an error line
    ctl.env["AIRFLOW_CLI_TOKEN"] = token
    assert "Login successful" in ctl.ok("auth", "login", "--api-url", live_server.url, "--skip-keyring")
    assert [r["dag_run_id"] for r in ctl.one("dagrun", "list")["dag_runs"]] == [RUN]
