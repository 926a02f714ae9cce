"""Database faults said precisely (503 only for a busy database, a pool time-out or a lost
connection; 507 for a full one; 500 for anything else), and reads that never write."""

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import OperationalError

from app.auth.models import InstallationSecret
from app.db.faults import DatabaseFault, database_fault
from app.main import create_app
from app.ops.migrate import upgrade
from app.web.deps import SessionDep
from tests.support.api import Operator, assert_problem, task
from tests.support.clusters import Cluster, database_on, is_shared_server
from tests.support.databases import PG_ADMIN_URL, throwaway_database
from tests.support.filesystems import small_filesystem
from tests.support.settings import app_settings
from tests.support.tcp_proxy import TcpProxy


def run_body(run_id: str, conf_bytes: int = 0) -> dict:
    return {"dag_id": "d", "run_id": run_id, "tasks": [task("a")], "conf": {"blob": os.urandom(conf_bytes).hex()}}


@contextmanager
def operator_on(url: str, **overrides) -> Iterator[Operator]:
    with TestClient(create_app(app_settings(url, **overrides))) as client:
        yield Operator(client)


class TestFaults:
    def test_a_full_database_answers_507_and_writes_nothing(self, db_url):
        backend = "postgresql" if db_url.startswith("postgresql") else "sqlite"
        with small_filesystem("3m") as mount, database_on(mount, backend) as url, \
                operator_on(url) as client:
            assert not is_shared_server(url)
            answers = [client.post("/v1/runs", json=run_body(f"r{n}", 96 * 1024)) for n in range(64)]
            full = [a for a in answers if a.status_code != 201]
            assert full, "the file system never filled"
            problem = assert_problem(full[0], 507, "database-full")
            assert problem["detail"] == DatabaseFault.FULL.detail
            stored = {r["run_id"] for r in client.get("/v1/runs", params={"limit": 500}).json()["items"]}
            assert stored == {f"r{n}" for n, a in enumerate(answers) if a.status_code == 201}

    def test_a_tablespace_is_never_made_on_the_shared_server(self, tmp_path):
        """A server whose tablespace fills up or vanishes may PANIC and stop for every database
        on it, so the disk-full tests only ever fill one of a cluster of their own."""
        shared = Cluster(tmp_path, tmp_path)
        shared.port = make_url(PG_ADMIN_URL).port or 5432
        with pytest.raises(AssertionError, match="cluster of the test's own"):
            shared.create_database(tablespace_in=tmp_path)

    def test_no_free_connection_is_503_naming_the_pool(self, make_client):
        client = make_client(database_pool_size=1, database_max_overflow=0, database_pool_timeout_seconds=0.2)
        operator = Operator(client)
        with client.app.state.engine.connect():  # the pool's only connection, held
            resp = operator.get("/v1/runs")
            problem = assert_problem(resp, 503, "database-unavailable")
            assert problem["detail"] == DatabaseFault.POOL_TIMEOUT.detail
            assert resp.headers["retry-after"] == "1"
        assert operator.get("/v1/runs").status_code == 200

    @pytest.mark.postgres_only("a SQLite file has no connection to lose")
    def test_a_lost_database_is_503_naming_the_connection(self, db_url):
        url = make_url(db_url)
        with TcpProxy(url.host, url.port or 5432) as proxy, \
                operator_on(str(url.set(host="127.0.0.1", port=proxy.port))) as client:
            assert client.get("/v1/runs").status_code == 200
            proxy.cut()
            resp = client.get("/v1/runs")
            problem = assert_problem(resp, 503, "database-unavailable")
            assert problem["detail"] == DatabaseFault.CONNECTION_LOST.detail
            assert resp.headers["retry-after"] == "1"
            proxy.restore()
            assert client.get("/v1/runs").status_code == 200

    def test_a_missing_table_is_a_500_not_a_retry(self, db_url, tmp_path):
        backend = "postgresql" if db_url.startswith("postgresql") else "sqlite"
        with throwaway_database(backend, tmp_path) as url:
            upgrade(url)
            with operator_on(url) as client:
                run = client.post("/v1/runs", json=run_body("r")).json()
                engine = create_engine(url)
                with engine.begin() as conn:
                    conn.execute(text("DROP TABLE task_attempts"))
                engine.dispose()
                resp = client.get(f"/v1/task-instances/{run['task_instances'][0]['ti_id']}/attempts")
                assert_problem(resp, 500, "internal-error")
                assert "retry-after" not in resp.headers

    def test_a_busy_database_is_told_apart_from_other_errors(self, db_url, tmp_path):
        """Real errors of the real database: a lock that cannot be had is BUSY; a missing table
        is no fault a retry would mend."""
        if db_url.startswith("postgresql"):
            engine = create_engine(db_url)
            busy_sql = ["SET lock_timeout = '10ms'", "LOCK TABLE seats IN ACCESS EXCLUSIVE MODE"]
            first_sql = "LOCK TABLE seats IN ACCESS EXCLUSIVE MODE"
        else:
            engine = create_engine(f"sqlite:///{tmp_path / 'busy.db'}", connect_args={"timeout": 0},
                                   isolation_level="AUTOCOMMIT")
            busy_sql, first_sql = ["BEGIN IMMEDIATE"], "BEGIN IMMEDIATE"
        try:
            with engine.connect() as holder, engine.connect() as waiter:
                holder.exec_driver_sql(first_sql)
                with pytest.raises(OperationalError) as busy:
                    for sql in busy_sql:
                        waiter.exec_driver_sql(sql)
                holder.rollback()
            assert database_fault(busy.value) is DatabaseFault.BUSY
            with engine.connect() as conn, pytest.raises(Exception) as missing:
                conn.exec_driver_sql("SELECT * FROM no_such_table")
            assert database_fault(missing.value) is None
        finally:
            engine.dispose()


def writing_get(app: FastAPI) -> None:
    @app.get("/test/writes-in-a-get")
    def writes(session: SessionDep) -> dict:
        session.add(InstallationSecret(name="written-by-a-get", value="x"))
        session.flush()
        return {}


class TestReadsDoNotWrite:
    def test_a_get_that_writes_fails_and_writes_nothing(self, db_url, engine):
        app = create_app(app_settings(db_url))
        writing_get(app)
        with TestClient(app, raise_server_exceptions=False) as client:
            assert_problem(client.get("/test/writes-in-a-get"), 500, "internal-error")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM installation_secrets "
                                     "WHERE name = 'written-by-a-get'")).scalar() == 0

    def test_one_connection_serves_reads_and_writes_in_turn_each_as_what_it_is(self, db_url, engine):
        """With one pooled connection, a write, a GET that writes, a write and the GET again
        share it: the writes land, the GETs fail and write nothing (on SQLite the connection is
        made query-only for a read and writable for a write, each time it changes hands)."""
        app = create_app(app_settings(db_url, database_pool_size=1, database_max_overflow=0))
        writing_get(app)
        with TestClient(app, raise_server_exceptions=False) as client:
            operator = Operator(client)
            for n in range(2):
                assert operator.post("/v1/runs", json=run_body(f"r{n}")).status_code == 201
                assert_problem(client.get("/test/writes-in-a-get"), 500, "internal-error")
            assert operator.get("/v1/runs/d/r1").status_code == 200
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM installation_secrets "
                                     "WHERE name = 'written-by-a-get'")).scalar() == 0
            assert conn.execute(text("SELECT count(*) FROM dag_runs")).scalar() == 2

    def test_a_get_is_answered_while_a_writer_holds_the_write_lock(self, operator, engine):
        """A read on SQLite takes no write lock: it is not queued behind a writer."""
        operator.post("/v1/runs", json=run_body("r"))
        with engine.connect() as writer:
            writer.execute(text("UPDATE dag_runs SET conf = conf"))  # holds the write lock (SQLite) / the rows
            resp = operator.get("/v1/runs/d/r")
            writer.rollback()
        assert resp.status_code == 200
