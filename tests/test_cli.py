"""The `fenceline` command on default settings: serve answers, migrate migrates."""

import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from app.ops.migrate import head_revision
from tests.conftest import _free_port

FENCELINE = [str(Path(sys.executable).with_name("fenceline"))]
START_TIMEOUT = 60


def default_env(data_dir: Path) -> dict[str, str]:
    """The environment with no fenceline settings but the data directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCELINE_") and k != "DATABASE_URL"}
    return {**env, "FENCELINE_DATA_DIR": str(data_dir)}


class Server:
    """`fenceline serve` as a child process, its output collected by a thread."""

    def __init__(self, cwd: Path, env: dict[str, str], *args: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [*FENCELINE, "serve", "--port", str(self.port), *args], cwd=cwd, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_healthy(self) -> httpx.Response:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"fenceline serve exited:\n{self.output}"
            try:
                return httpx.get(f"{self.url}/health", timeout=5)
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError(f"fenceline serve did not answer in {START_TIMEOUT}s:\n{self.output}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)


@pytest.fixture
def serve(tmp_path):
    servers: list[Server] = []

    def start() -> Server:
        servers.append(Server(tmp_path, default_env(tmp_path / "data")))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def test_serve_answers_and_prints_its_data_and_password(serve, tmp_path):
    server = serve()
    assert server.wait_healthy().json() == {"status": "ok", "database": "sqlite"}
    assert str(tmp_path / "data" / "fenceline.db") in server.output
    password = re.search(r"password '([^']+)'", server.output).group(1)
    login = httpx.post(f"{server.url}/auth/token", json={"username": "admin", "password": password})
    assert login.status_code == 201


def test_a_restart_keeps_the_password_and_prints_it_no_more(serve):
    first = serve()
    first.wait_healthy()
    password = re.search(r"password '([^']+)'", first.output).group(1)
    first.stop()
    second = serve()
    second.wait_healthy()
    assert password not in second.output
    login = httpx.post(f"{second.url}/auth/token", json={"username": "admin", "password": password})
    assert login.status_code == 201


def test_migrate_creates_the_default_database(tmp_path):
    env = default_env(tmp_path / "data")
    for _ in range(2):  # and is idempotent
        done = subprocess.run([*FENCELINE, "migrate"], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=START_TIMEOUT)
        assert done.returncode == 0, done.stderr
        assert "latest revision" in done.stdout
    assert (tmp_path / "data" / "fenceline.db").stat().st_size > 0


def test_migrate_check_changes_nothing_and_says_whether_the_schema_is_at_head(tmp_path):
    """What the server Pods' init container polls while the migration Job runs."""
    env = default_env(tmp_path / "data")

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
    assert "latest revision" in after.stdout


def _serve_no_migrate(tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*FENCELINE, "serve", "--no-migrate", "--port", str(_free_port())], cwd=tmp_path,
                          env=default_env(tmp_path / "data"), capture_output=True, text=True, timeout=START_TIMEOUT)


class TestNoMigrate:
    """`serve --no-migrate` (a separate migration job migrates) serves only a schema at head."""

    def test_a_schema_behind_head_is_refused_with_status_5_naming_both_revisions(self, tmp_path):
        done = _serve_no_migrate(tmp_path)
        assert done.returncode == 5
        (line,) = done.stderr.strip().splitlines()
        assert "none (never migrated)" in line and head_revision() in line
        assert not (tmp_path / "data" / "fenceline.db").exists()

    def test_a_schema_ahead_of_head_is_refused_with_status_5(self, tmp_path):
        subprocess.run([*FENCELINE, "migrate"], cwd=tmp_path, env=default_env(tmp_path / "data"), check=True,
                       capture_output=True, timeout=START_TIMEOUT)
        with sqlite3.connect(tmp_path / "data" / "fenceline.db") as db:
            db.execute("UPDATE alembic_version SET version_num = '9999_from_a_newer_release'")
        done = _serve_no_migrate(tmp_path)
        assert done.returncode == 5
        (line,) = done.stderr.strip().splitlines()
        assert "9999_from_a_newer_release" in line and head_revision() in line

    def test_a_schema_at_head_is_served(self, tmp_path):
        subprocess.run([*FENCELINE, "migrate"], cwd=tmp_path, env=default_env(tmp_path / "data"), check=True,
                       capture_output=True, timeout=START_TIMEOUT)
        server = Server(tmp_path, default_env(tmp_path / "data"), "--no-migrate")
        try:
            assert server.wait_healthy().status_code == 200
        finally:
            server.stop()
