"""Start-up refusals: each stops the worker with a status and a message that says why."""

import subprocess
import sys

import pytest

from tests.support.agents import REPO
from tests.support.api import ADMIN_PASSWORD, Operator
from tests.support.servers import clean_env
from tests.support.waiting import wait_until


class TestStartup:
    def test_a_launcher_token_admits_without_the_operator_password(self, server, workers):
        operator = Operator(server.client())
        token = operator.launcher_token()
        worker = workers(server, "etl-a", extra_env={"FENCELINE_ADMIN_PASSWORD": "", "FENCELINE_LAUNCHER_TOKEN": token})
        wait_until(lambda: operator.get("/v1/seats/etl-a").status_code == 200, "the admission")
        assert worker.stop() == 0

    def test_no_credential_at_all(self, server, workers):
        worker = workers(server, "etl-a", extra_env={"FENCELINE_ADMIN_PASSWORD": ""})
        assert worker.proc.wait(timeout=30) == 2  # a usage error
        assert "a credential is needed to admit the worker" in worker.output

    def test_wrong_operator_credentials(self, server, workers):
        worker = workers(server, "etl-a", extra_env={"FENCELINE_ADMIN_PASSWORD": "wrong-" + ADMIN_PASSWORD})
        assert worker.proc.wait(timeout=30) == 1
        assert "operator login as 'admin' refused (401)" in worker.output

    def test_one_worker_per_state_directory(self, server, workers):
        operator = Operator(server.client())
        first = workers(server, "etl-a")
        wait_until(lambda: operator.get("/v1/seats/etl-a").status_code == 200, "the first admission")
        second = workers(server, "etl-a")
        assert second.proc.wait(timeout=30) == 1
        assert "another worker is using" in second.output
        assert first.stop() == 0

    def test_a_seat_held_by_another_state_directory(self, server, workers):
        operator = Operator(server.client())
        first = workers(server, "etl-a")
        wait_until(lambda: operator.get("/v1/seats/etl-a").status_code == 200, "the first admission")
        intruder = workers(server, "etl-a", state="elsewhere")
        assert intruder.proc.wait(timeout=30) == 3
        assert f"seat 'etl-a' is held by execution {operator.execution_of('etl-a')}" in intruder.output
        assert first.stop() == 0


@pytest.mark.parametrize(("name", "value", "said"), [
    ("FENCELINE_WORKER_CONCURRENCY", "abc", "'abc' is not a whole number"),
    ("FENCELINE_WORKER_CONCURRENCY", "0", "must be at least 1, not 0"),
    ("FENCELINE_WORKER_HEARTBEAT_INTERVAL", "soon", "'soon' is not a number of seconds"),
    ("FENCELINE_WORKER_GRACE_PERIOD", "nan", "'nan' is not a number of seconds"),
    ("--claim-wait", "inf", "'inf' is not a number of seconds"),
    ("FENCELINE_WORKER_RUNTIME", "docker", "'docker' is not one of local, kubernetes"),
    ("--claim-wait", "0", "must be above 0, not 0"),
    ("--queues", " , ", "must name at least one queue"),
    # Issue 41, item 5: retried forever on 15e7989 (httpx's UnsupportedProtocol), as if unreachable.
    ("--server", "notaurl", "'notaurl' is not the server's URL (http://host:port or https://host)"),
    ("FENCELINE_SERVER", "ftp://fenceline", "'ftp://fenceline' is not the server's URL (http://host:port or https://host)"),
])
def test_a_setting_that_does_not_parse_stops_the_worker_with_one_line_and_status_2(name, value, said, tmp_path):
    """Named by the flag or the variable it came from, before the worker does anything."""
    flags, env = ([name, value], {}) if name.startswith("--") else ([], {name: value})
    done = subprocess.run([sys.executable, "-m", "app.cli", "worker", "--state-dir", str(tmp_path / "state"), *flags],
                          cwd=REPO, env={**clean_env(), "FENCELINE_ADMIN_PASSWORD": ADMIN_PASSWORD, **env},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"fenceline worker: {name}: {said}"]
    assert not (tmp_path / "state").exists()
