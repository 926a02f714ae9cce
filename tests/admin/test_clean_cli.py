"""`fenceline db clean` from a shell: a dry run unless --yes, progress on stderr (a bar on a
terminal), and bad input refused in one line with its documented status, never a traceback."""

import subprocess
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.support.api import Operator
from tests.support.history import finished
from tests.support.ports import free_port
from tests.support.servers import FENCELINE, START_TIMEOUT, clean_env
from tests.support.settings import app_settings
from tests.support.terminal import stderr_on_terminal


def db_clean(env: dict[str, str], *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*FENCELINE, "db", "clean", *args], env=env, timeout=START_TIMEOUT, **kwargs)


@pytest.fixture
def installation(tmp_path: Path) -> dict[str, str]:
    """A SQLite installation in tmp_path holding two runs that ended 40 days ago and one that
    ended 10 days ago; answers the environment of a command run on it."""
    data = tmp_path / "data"
    settings = app_settings(f"sqlite:///{data / 'fenceline.db'}", data_dir=data)
    subprocess.run([*FENCELINE, "migrate"], env=clean_env(data), check=True, capture_output=True,
                   timeout=START_TIMEOUT)
    with TestClient(create_app(settings)) as client:
        operator = Operator(client)
        finished(operator, "old")
        finished(operator, "older", days_ago=50)
        finished(operator, "recent", days_ago=10)
    return clean_env(data)


def test_a_dry_run_prints_what_would_go_and_yes_deletes_it(installation):
    dry = db_clean(installation, "--before", "30d", capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    assert "would delete (a dry run: give --yes to delete)" in dry.stdout
    assert "dag_runs                           2" in dry.stdout
    assert "task_instances                     4" in dry.stdout
    again = db_clean(installation, "--before", "30d", capture_output=True, text=True)
    assert again.stdout.splitlines()[1:] == dry.stdout.splitlines()[1:]  # nothing changed
    done = db_clean(installation, "--before", "30d", "--yes", "--batch-size", "1", capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["fenceline: deleted 1 of 2 runs", "fenceline: deleted 2 of 2 runs"]
    assert "fenceline: db clean deleted:" in done.stdout and "dag_runs                           2" in done.stdout
    assert "dag_runs                           0" in db_clean(installation, "--before", "30d", capture_output=True,
                                                              text=True).stdout


def test_a_terminal_shows_a_progress_bar(installation):
    done, shown = stderr_on_terminal(
        [*FENCELINE, "db", "clean", "--before", "2026-12-31", "--keep-last", "1", "--yes"], installation)
    assert done.returncode == 0
    assert shown.endswith(f"[{'#' * 30}] 2/2 runs, 4 task instances deleted\r\n")


@pytest.mark.parametrize(("args", "said"), [
    (["--before", "last tuesday"], "give an ISO date"),
    (["--before", "2026-02-30"], "give an ISO date"),
    (["--before", "30d", "--keep-last", "-1"], "give a whole number of at least 0"),
    (["--before", "30d", "--batch-size", "0"], "give a whole number of at least 1"),
    (["--before", "30d", "--force"], "unrecognized arguments: --force"),
    ([], "the following arguments are required: --before"),
])
def test_bad_input_is_one_line_and_status_2(tmp_path, args, said):
    done = db_clean(clean_env(tmp_path), *args, capture_output=True, text=True)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and said in done.stderr, done.stderr


def test_a_database_that_does_not_answer_is_one_line_and_status_4(tmp_path):
    env = {**clean_env(tmp_path), "FENCELINE_DATABASE_URL": f"postgresql://nobody@127.0.0.1:{free_port()}/none",
           "FENCELINE_DB_CONNECT_TIMEOUT_SECONDS": "0"}
    done = db_clean(env, "--before", "30d", capture_output=True, text=True)
    assert done.returncode == 4 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "did not answer" in done.stderr and "Traceback" not in done.stderr


def test_a_schema_this_version_does_not_serve_is_status_5(tmp_path):
    env = {**clean_env(tmp_path), "FENCELINE_DATABASE_URL": f"sqlite:///{tmp_path / 'empty.db'}"}
    done = db_clean(env, "--before", "30d", capture_output=True, text=True)
    assert done.returncode == 5 and len(done.stderr.splitlines()) == 1, done.stderr
