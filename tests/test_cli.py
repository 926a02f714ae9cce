"""The `fenceline` command on default settings: serve answers, migrate migrates."""

import re
import sqlite3
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from app.cli import main
from app.ops.migrate import head_revision
from tests.support.ports import free_port
from tests.support.servers import FENCELINE, START_TIMEOUT, Served, clean_env
from tests.support.waiting import wait_until


@pytest.fixture
def serve(tmp_path):
    servers: list[Served] = []

    def start(**env: str) -> Served:
        servers.append(Served(tmp_path, {**clean_env(tmp_path / "data"), **env}))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def test_serve_answers_and_shows_its_data_and_password_on_a_terminal(tmp_path):
    with Served(tmp_path, clean_env(tmp_path / "data"), terminal=True) as server:
        assert server.wait_healthy().json() == {"status": "ok", "database": "sqlite"}
        wait_until(lambda: "password '" in server.output, "the password on the terminal")
        assert str(tmp_path / "data" / "fenceline.db") in server.output
        password = re.search(r"password '([^']+)'", server.output).group(1)
        login = httpx.post(f"{server.url}/auth/token", json={"username": "admin", "password": password})
        assert login.status_code == 201
    assert not (tmp_path / "data" / "operator-password").exists()


@pytest.mark.parametrize("log_format", ["plain", "json"])
def test_off_a_terminal_the_password_goes_to_a_file_only_this_user_reads(serve, tmp_path, log_format):
    """Output that is not a terminal is a log stream (a container's, an aggregator's): it is told
    where the password is, not what it is."""
    server = serve(FENCELINE_LOG_FORMAT=log_format)
    server.wait_healthy()
    path = tmp_path / "data" / "operator-password"
    wait_until(lambda: str(path) in server.output, "the password's file named")
    password = path.read_text().strip()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert password not in server.output
    login = httpx.post(f"{server.url}/auth/token", json={"username": "admin", "password": password})
    assert login.status_code == 201


def test_a_restart_keeps_the_password_and_hands_it_over_no_more(serve, tmp_path):
    first = serve()
    first.wait_healthy()
    path = tmp_path / "data" / "operator-password"
    wait_until(path.exists, "the password's file")
    password = path.read_text().strip()
    first.stop()
    path.unlink()  # read, and deleted as the server said
    second = serve()
    second.wait_healthy()
    assert "operator-password" not in second.output and not path.exists()
    login = httpx.post(f"{second.url}/auth/token", json={"username": "admin", "password": password})
    assert login.status_code == 201


def test_migrate_creates_the_default_database(tmp_path):
    env = clean_env(tmp_path / "data")
    for _ in range(2):  # and is idempotent
        done = subprocess.run([*FENCELINE, "migrate"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=START_TIMEOUT)
        assert done.returncode == 0, done.stderr
        assert "the migrations' head" in done.stdout
    assert (tmp_path / "data" / "fenceline.db").stat().st_size > 0


def test_migrate_check_changes_nothing_and_says_whether_the_schema_is_at_head(tmp_path):
    """What the server Pods' init container polls while the migration Job runs."""
    env = clean_env(tmp_path / "data")

    def check() -> subprocess.CompletedProcess:
        return subprocess.run([*FENCELINE, "migrate", "--check"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=START_TIMEOUT)

    before = check()
    assert before.returncode == 5
    assert "none (never migrated)" in before.stderr and head_revision() in before.stderr
    assert not (tmp_path / "data" / "fenceline.db").exists()
    subprocess.run([*FENCELINE, "migrate"], cwd=tmp_path, env=env, check=True, capture_output=True,
                   timeout=START_TIMEOUT)
    after = check()
    assert after.returncode == 0, after.stderr
    assert "served by this version" in after.stdout


def _serve_no_migrate(tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*FENCELINE, "serve", "--no-migrate", "--port", str(free_port())], cwd=tmp_path,
                          env=clean_env(tmp_path / "data"), capture_output=True, text=True, timeout=START_TIMEOUT)


class TestNoMigrate:
    """`serve --no-migrate` (a separate migration job migrates) serves only a schema at head."""

    def test_a_schema_behind_head_is_refused_with_status_5_naming_both_revisions(self, tmp_path):
        done = _serve_no_migrate(tmp_path)
        assert done.returncode == 5
        (line,) = done.stderr.strip().splitlines()
        assert "none (never migrated)" in line and head_revision() in line
        assert not (tmp_path / "data" / "fenceline.db").exists()

    def test_a_schema_ahead_of_head_is_refused_with_status_5(self, tmp_path):
        subprocess.run([*FENCELINE, "migrate"], cwd=tmp_path, env=clean_env(tmp_path / "data"), check=True,
                       capture_output=True, timeout=START_TIMEOUT)
        with sqlite3.connect(tmp_path / "data" / "fenceline.db") as db:
            db.execute("UPDATE alembic_version SET version_num = '9999_from_a_newer_release'")
        done = _serve_no_migrate(tmp_path)
        assert done.returncode == 5
        (line,) = done.stderr.strip().splitlines()
        assert "9999_from_a_newer_release" in line and head_revision() in line

    def test_a_schema_at_head_is_served(self, tmp_path):
        subprocess.run([*FENCELINE, "migrate"], cwd=tmp_path, env=clean_env(tmp_path / "data"), check=True,
                       capture_output=True, timeout=START_TIMEOUT)
        server = Served(tmp_path, clean_env(tmp_path / "data"), "--no-migrate")
        try:
            assert server.wait_healthy().status_code == 200
        finally:
            server.stop()


def test_serve_help_says_what_host_and_port_are(capsys):
    with pytest.raises(SystemExit) as done:
        main(["serve", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    said = " ".join(out.split())  # as argparse wraps it at any width
    assert "--host HOST the address to listen on (default 127.0.0.1" in said
    assert "--port PORT the port to listen on (default 8000)" in said


@pytest.mark.parametrize("command", ["worker", "launcher"])
def test_agent_help_says_each_settings_variable_and_default(capsys, command):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "--server SERVER the fenceline server (env FENCELINE_SERVER; default http://127.0.0.1:8000)" in said
