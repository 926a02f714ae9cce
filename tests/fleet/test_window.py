"""How far back a schema may be served (contract 10.1): a release serves a database a later
release migrated while every migration past its head only adds, and refuses it in one line
(exit 5) otherwise; `fenceline migrate` stops before a contract migration."""

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.fleet.window import Chain
from app.main import create_app
from app.ops.migrate import head_revision, schema_revision, serving_refusal, upgrade
from tests.support.api import Operator, Worker, assert_problem, task
from tests.support.databases import BACKENDS, throwaway_database
from tests.support.ports import free_port
from tests.support.releases import database_env, next_release, run_release
from tests.support.settings import app_settings

CHAIN = Chain((("a", True), ("b", False), ("c", True), ("d", True), ("e", False), ("f", True)))


class TestChain:
    def test_a_schema_is_served_from_its_latest_contract_migration_on(self):
        assert [CHAIN.servable_from(r) for r in "abcdef"] == ["a", "b", "b", "b", "e", "e"]

    def test_migrate_stops_before_the_first_contract_migration_waiting(self):
        assert [CHAIN.expand_target(r) for r in "abcdef"] == [None, "d", "d", None, "f", None]
        assert CHAIN.expand_target(None) == "f"  # a database never migrated: no release serves it yet
        assert [CHAIN.first_contract(r) for r in "acdf"] == ["b", "e", "e", None]


def serves_a_run(url: str) -> None:
    """This release's app on `url`: ready, and a run goes through it."""
    with TestClient(create_app(app_settings(url))) as client:
        assert client.get("/health/ready").json()["checks"]["schema"] == "ok"
        operator = Operator(client)
        operator.create_run(task("a"))
        (item,) = Worker(operator, "w1").claim(5)
        item.report("success")
        assert operator.run()["state"] == "success"


def one_line(done) -> str:
    assert done.returncode == 5, done.stderr
    (line,) = done.stderr.strip().splitlines()
    return line


@pytest.mark.parametrize("backend", BACKENDS)
class TestALaterReleasesSchema:
    def test_one_expand_only_migration_ahead_is_served(self, backend, tmp_path):
        with throwaway_database(backend, tmp_path) as url:
            env = database_env(url, tmp_path / "data")
            upgrade(url)
            release = next_release(tmp_path, ("0099_next", True))
            assert run_release(release, "migrate", env=env).returncode == 0
            assert schema_revision(url) == "0099_next"
            assert serving_refusal(url) is None
            done = run_release(None, "migrate", env=env)  # this release: nothing to do, no refusal
            assert done.returncode == 0 and "nothing to migrate" in done.stdout, done.stderr
            assert run_release(None, "migrate", "--check", env=env).returncode == 0
            serves_a_run(url)  # the models ignore the column they do not know
            assert schema_revision(url) == "0099_next"

    def test_one_contract_migration_ahead_is_refused_in_one_line(self, backend, tmp_path):
        with throwaway_database(backend, tmp_path) as url:
            env = database_env(url, tmp_path / "data")
            upgrade(url)
            release = next_release(tmp_path, ("0099_next", False))
            assert run_release(release, "migrate", "--contract", env=env).returncode == 0
            assert schema_revision(url) == "0099_next"
            for args in (("migrate",), ("serve", "--port", str(free_port())), ("serve", "--no-migrate")):
                line = one_line(run_release(None, *args, env=env))
                assert "0099_next" in line and head_revision() in line and "contract" in line
            with TestClient(create_app(app_settings(url))) as client:
                problem = assert_problem(client.get("/health/ready"), 503, "not-ready")
                assert "0099_next" in problem["checks"]["schema"]

    def test_migrate_stops_before_a_contract_migration_and_contract_applies_it(self, backend, tmp_path):
        with throwaway_database(backend, tmp_path) as url:
            env = database_env(url, tmp_path / "data")
            upgrade(url, "0011")
            release = next_release(tmp_path, ("0099_contract", False), ("0100_after", True))
            done = run_release(release, "migrate", env=env)
            assert done.returncode == 5  # the next release needs 0100, which waits behind the contract steps
            assert schema_revision(url) == "0012"  # 0012 applied; 0013 (this release's contract step) and on not
            assert "0013" in done.stdout and "--contract" in one_line(done)
            assert "--contract" in serving_refusal(url)  # this release's 0014 waits behind its 0013 too
            done = run_release(release, "migrate", "--contract", env=env)
            assert done.returncode == 0, done.stderr
            assert schema_revision(url) == "0100_after"
            done = run_release(release, "migrate", "--contract", env=env)
            assert done.returncode == 0 and "nothing to contract" in done.stdout

    def test_a_release_serves_its_schema_while_only_its_contract_migrations_wait(self, backend, tmp_path):
        with throwaway_database(backend, tmp_path) as url:
            env = database_env(url, tmp_path / "data")
            upgrade(url)
            release = next_release(tmp_path, ("0099_next", True), ("0100_contract", False))
            done = run_release(release, "migrate", env=env)
            assert done.returncode == 0, done.stderr
            assert schema_revision(url) == "0099_next" and "0100_contract" in done.stdout
            assert run_release(release, "migrate", "--check", env=env).returncode == 0
            serves_a_run(url)  # and the release before it too


class TestARecordedWindow:
    """A later release's revision recorded the way its migrations record it."""

    @pytest.fixture
    def later(self, engine):
        def record(revision: str, servable_from: str) -> None:
            with engine.begin() as conn:
                conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
                conn.execute(text("DELETE FROM schema_window"))
                conn.execute(text("INSERT INTO schema_window (revision, servable_from, written_at) "
                                  "VALUES (:r, :s, CURRENT_TIMESTAMP)"), {"r": revision, "s": servable_from})

        yield record
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = :head"), {"head": head_revision()})

    def test_ready_within_the_window(self, client, later):
        later("0099_later", "0003")
        assert client.get("/health/ready").json()["checks"]["schema"] == "ok"

    def test_not_ready_past_it_naming_both_revisions(self, client, later):
        later("0099_later", "0099_later")
        problem = assert_problem(client.get("/health/ready"), 503, "not-ready")
        assert "0099_later" in problem["detail"] and head_revision() in problem["detail"]

    def test_a_window_recorded_for_another_revision_is_not_believed(self, client, later, engine):
        later("0099_later", "0003")
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '0100_unrecorded'"))
        assert_problem(client.get("/health/ready"), 503, "not-ready")
