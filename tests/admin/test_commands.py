"""`fenceline runs …` and `fenceline tasks …` (contract 12) against a live server: tables and
--json, each rail, credentials from a file, the environment or a token, and one line with a
non-zero exit on any refusal."""

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.cli import main
from tests.support.api import ADMIN_PASSWORD, Operator, Worker, task, ti_ids


@pytest.fixture
def cli(live_server, monkeypatch, capsys, tmp_path):
    """`fenceline ARGS…` in this process against the live server, as the operator (password from
    the environment); answers (exit status, stdout, stderr)."""
    monkeypatch.setenv("FENCELINE_PASSWORD", ADMIN_PASSWORD)
    monkeypatch.setenv("FENCELINE_DEVICE_FILE", str(tmp_path / "device"))
    monkeypatch.delenv("FENCELINE_TOKEN", raising=False)

    def run(*args: str) -> tuple[int, str, str]:
        status = main([*args, "--server", live_server.url])
        out, err = capsys.readouterr()
        return status, out, err

    return run


@pytest.fixture
def operator(live_server):
    with live_server.client() as http:
        yield Operator(http)


def json_of(answer: tuple[int, str, str]):
    status, out, err = answer
    assert status == 0, err
    return json.loads(out)


class TestReads:
    def test_runs_list_and_show_as_tables_and_json(self, cli, operator):
        operator.create_run(task("a"), task("b", "a"), dag_id="etl", run_id="r1")
        status, out, _ = cli("runs", "list")
        assert status == 0
        header, row, *_ = out.splitlines()
        assert header.split() == ["DAG", "RUN", "STATE", "CREATED", "ENDED", "TASKS"]
        assert row.split()[:3] == ["etl", "r1", "running"] and "none:1 scheduled:1" in row
        listed = json_of(cli("runs", "list", "--dag-id", "etl", "--json"))
        assert [r["run_id"] for r in listed["items"]] == ["r1"]
        status, out, _ = cli("runs", "show", "etl", "r1")
        assert status == 0 and "TI" in out and " a " in out
        assert json_of(cli("runs", "show", "etl", "r1", "--json"))["state"] == "running"

    def test_tasks_list_show_and_attempts(self, cli, operator):
        run = operator.create_run(task("a"), task("b"), dag_id="etl", run_id="r1")
        Worker(operator).claim_one().report("failed", reason="exit 3")
        failed = json_of(cli("tasks", "list", "etl", "r1", "--state", "failed", "--json"))
        assert len(failed) == 1 and failed[0]["last_failure_reason"] == "exit 3"
        by_name = json_of(cli("tasks", "show", "etl", "r1", failed[0]["task_id"], "--json"))
        assert by_name == json_of(cli("tasks", "show", failed[0]["ti_id"], "--json"))
        status, out, _ = cli("tasks", "attempts", failed[0]["ti_id"])
        assert status == 0 and out.splitlines()[1].split()[:5] == ["1", "1", "failed", "app", "exit"]
        assert set(ti_ids(run).values()) >= {failed[0]["ti_id"]}


class TestRails:
    def test_cancel_then_clear_failed(self, cli, operator):
        operator.create_run(task("a"), task("b", "a"), dag_id="etl", run_id="r1")
        attempt = Worker(operator).claim_one()
        status, out, _ = cli("runs", "cancel", "etl", "r1")
        assert status == 0 and out.startswith("cancelled")
        assert attempt.heartbeat().json()["should_terminate"] is True
        assert operator.run("etl", "r1")["state"] == "failed"
        resumed = json_of(cli("runs", "clear-failed", "etl", "r1", "--json"))
        assert {ti["task_id"]: ti["state"] for ti in resumed["task_instances"]} == {"a": "scheduled", "b": "none"}

    def test_clear_mark_and_replace(self, cli, operator):
        run = operator.create_run(task("a", max_infra_attempts=2), task("b"), dag_id="etl", run_id="r1")
        worker = Worker(operator)
        worker.claim(10)
        replaced = json_of(cli("tasks", "replace", "etl", "r1", "a", "--json"))
        assert (replaced["state"], replaced["last_failure_reason"]) == ("scheduled", "operator_replaced")
        marked = json_of(cli("tasks", "mark", ti_ids(run)["b"], "failed", "--json"))
        assert marked["state"] == "failed"
        status, out, _ = cli("tasks", "clear", ti_ids(run)["b"])
        assert status == 0 and out.startswith("cleared") and "scheduled" in out
        assert operator.ti(ti_ids(run)["b"])["try_number"] == 2


class TestRefusals:
    def test_a_409_is_one_line_and_exit_1(self, cli, operator):
        run = operator.create_run(task("a"), dag_id="etl", run_id="r1")
        status, out, err = cli("tasks", "replace", ti_ids(run)["a"])
        assert (status, out) == (1, "")
        assert err.startswith("fenceline: refused (409 task-instance-not-in-flight): ") and err.count("\n") == 1

    def test_an_unknown_run_is_one_line_and_exit_1(self, cli):
        status, _, err = cli("runs", "cancel", "etl", "nope")
        assert status == 1 and err.startswith("fenceline: refused (404 run-not-found)") and err.count("\n") == 1

    def test_a_wrong_password_is_refused_401(self, cli, monkeypatch):
        monkeypatch.setenv("FENCELINE_PASSWORD", "wrong")
        status, _, err = cli("runs", "list")
        assert status == 1 and err.startswith("fenceline: refused (401") and err.count("\n") == 1

    def test_no_credentials_and_an_unreadable_file_are_exit_2(self, cli, monkeypatch, tmp_path):
        monkeypatch.delenv("FENCELINE_PASSWORD")
        assert cli("runs", "list")[0] == 2
        status, _, err = cli("runs", "list", "--password-file", str(tmp_path / "missing"))
        assert status == 2 and "cannot read the password file" in err

    def test_a_server_not_reached_is_exit_3_without_a_traceback(self, tmp_path):
        env = {**os.environ, "FENCELINE_PASSWORD": "x", "PYTHONPATH": os.getcwd()}
        proc = subprocess.run([sys.executable, "-m", "app.cli", "runs", "list", "--server", "http://127.0.0.1:9"],
                              capture_output=True, text=True, env=env, timeout=60)
        assert proc.returncode == 3 and proc.stderr.startswith("fenceline: cannot reach the server")
        assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


class TestCredentials:
    def test_strangers_wrong_passwords_do_not_keep_out_a_terminal_that_logged_in_before(self, cli, live_server):
        """Contract 7: the CLI keeps its login's device token and sends it with the next login."""
        assert cli("runs", "list")[0] == 0
        with live_server.client() as stranger:
            refused = [stranger.post("/auth/token", json={"username": "admin", "password": "wrong"}).status_code
                       for _ in range(8)]
        assert 429 in refused  # the stranger is slowed
        status, _, err = cli("runs", "list")
        assert status == 0, err

    def test_a_server_that_is_not_fenceline_is_one_line(self, cli, capsys):
        """A page that answers 200 with HTML to everything (a proxy's, a captive portal's)."""
        class Page(BaseHTTPRequestHandler):
            def do_POST(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(b"<html>hello</html>")

            def log_message(self, *args):
                pass

        with ThreadingHTTPServer(("127.0.0.1", 0), Page) as page:
            threading.Thread(target=page.serve_forever, daemon=True).start()
            assert main(["runs", "list", "--server", f"http://127.0.0.1:{page.server_address[1]}"]) == 3
            page.shutdown()
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "without JSON" in err, err

    def test_a_password_file_or_a_token(self, cli, operator, monkeypatch, tmp_path):
        operator.create_run(task("a"), dag_id="etl", run_id="r1")
        monkeypatch.delenv("FENCELINE_PASSWORD")
        secret = tmp_path / "password"
        secret.write_text(ADMIN_PASSWORD + "\n")
        assert json_of(cli("runs", "list", "--password-file", str(secret), "--json"))["total_entries"] == 1
        token = tmp_path / "token"
        token.write_text(operator.token)
        assert (tmp_path / "device").stat().st_mode & 0o777 == 0o600
        assert json_of(cli("runs", "list", "--token-file", str(token), "--json"))["total_entries"] == 1
        monkeypatch.setenv("FENCELINE_TOKEN", operator.token)
        assert json_of(cli("runs", "list", "--json"))["total_entries"] == 1
