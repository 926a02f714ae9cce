"""The replica registry (contract 10.2): each replica records itself and its heartbeat, the
operator lists them, and `fenceline migrate --contract` waits for the older ones."""

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from app import __version__
from app.db.types import utcnow
from app.fleet import replicas
from app.main import create_app
from app.ops.migrate import head_revision, schema_revision, upgrade
from tests.support.api import Worker, assert_problem
from tests.support.databases import BACKENDS, throwaway_database
from tests.support.releases import database_env, next_release, run_release
from tests.support.settings import app_settings


class TestListing:
    def test_the_operator_sees_this_replica_alive(self, operator):
        (me,) = operator.get("/v1/admin/replicas").json()["items"]
        assert (me["version"], me["head"], me["alive"]) == (__version__, head_revision(), True)
        assert me["started_at"] <= me["last_seen_at"]

    def test_no_one_else_does(self, client, operator):
        assert_problem(client.get("/v1/admin/replicas"), 401, "unauthorized")
        worker = Worker(operator, "w1")
        assert_problem(worker.client.get("/v1/admin/replicas", headers=worker.headers), 403, "forbidden")


class TestHeartbeat:
    def test_a_heartbeat_refreshes_the_row_and_makes_it_again_once_forgotten(self, engine):
        me, now = replicas.Me.starting("1.0", "0012", 5), utcnow()
        with Session(engine) as session:
            replicas.seen(session=session, me=me, now=now)
            replicas.seen(session=session, me=me, now=now + timedelta(seconds=5))
            (row,) = replicas.listing(session=session)
            assert row.last_seen_at == now + timedelta(seconds=5) and row.liveness_seconds == 20
            assert replicas.alive(row, now + timedelta(seconds=24))
            assert not replicas.alive(row, now + timedelta(seconds=26))
            replicas.gone(session=session, me=me)
            replicas.seen(session=session, me=me, now=now + timedelta(seconds=10))
            assert [r.id for r in replicas.listing(session=session)] == [me.id]
            session.commit()

    def test_long_gone_replicas_are_forgotten(self, engine):
        old, new, now = replicas.Me.starting("0.9", "0011", 5), replicas.Me.starting("1.0", "0012", 5), utcnow()
        with Session(engine) as session:
            replicas.seen(session=session, me=old, now=now - replicas.FORGOTTEN_AFTER - timedelta(seconds=1))
            replicas.seen(session=session, me=new, now=now)
            assert [r.version for r in replicas.listing(session=session)] == ["1.0"]
            session.commit()


@pytest.mark.parametrize("backend", BACKENDS)
class TestContract:
    def test_refused_while_a_replica_of_an_older_head_is_alive(self, backend, tmp_path):
        with throwaway_database(backend, tmp_path) as url:
            env = database_env(url, tmp_path / "data")
            upgrade(url)
            release = next_release(tmp_path, ("0099_contract", False))
            with TestClient(create_app(app_settings(url))):  # this release serving: an older head
                done = run_release(release, "migrate", "--contract", env=env)
                assert done.returncode == 8, done.stderr
                (line,) = done.stderr.strip().splitlines()
                assert "0099_contract" in line and head_revision() in line and __version__ in line
                assert schema_revision(url) == head_revision()
            done = run_release(release, "migrate", "--contract", env=env)  # it stopped: its row went with it
            assert done.returncode == 0, done.stderr
            assert schema_revision(url) == "0099_contract"

    def test_a_replica_past_its_liveness_window_is_not_waited_for(self, backend, tmp_path):
        with throwaway_database(backend, tmp_path) as url:
            upgrade(url)
            from app.db.engine import make_engine

            engine = make_engine(url)
            me = replicas.Me.starting("0.9", head_revision(), 5)
            with Session(engine) as session:
                replicas.seen(session=session, me=me, now=utcnow() - timedelta(seconds=21))
                session.commit()
            engine.dispose()
            release = next_release(tmp_path, ("0099_contract", False))
            done = run_release(release, "migrate", "--contract", env=database_env(url, tmp_path / "data"))
            assert done.returncode == 0, done.stderr
            assert schema_revision(url) == "0099_contract"

    def test_nothing_to_contract_is_said_and_exits_0(self, backend, tmp_path):
        with throwaway_database(backend, tmp_path) as url:
            done = run_release(None, "migrate", "--contract", env=database_env(url, tmp_path / "data"))
            assert done.returncode == 0 and "nothing to contract" in done.stdout, done.stderr
            assert schema_revision(url) == head_revision()
