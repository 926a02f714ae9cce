"""`fenceline serve --workers N`: N processes on one port over PostgreSQL, one reaper among them,
and the refusals (SQLite, a connection budget PostgreSQL cannot hold)."""

import gc
import time

import httpx
import pytest
from sqlalchemy import create_engine, text

from app.main import served_app
from tests.support.api import bearer, task
from tests.support.databases import BACKENDS, throwaway_database
from tests.support.servers import Served, clean_env
from tests.support.settings import app_settings

needs_postgres = pytest.mark.skipif("postgresql" not in BACKENDS, reason="PostgreSQL is not among the test backends")
PASSWORD = "workers-test-password"


def _env(tmp_path, url: str | None, **settings: str) -> dict[str, str]:
    env = {**clean_env(tmp_path / "data"), "FENCELINE_ADMIN_PASSWORD": PASSWORD,
           **{f"FENCELINE_{k.upper()}": v for k, v in settings.items()}}
    if url is not None:
        env["FENCELINE_DATABASE_URL"] = url
    return env


def _refused(tmp_path, env: dict[str, str], *args: str) -> str:
    server = Served(tmp_path, env, *args)
    assert server.process.wait(timeout=60) == 7, server.output
    return server.output


@needs_postgres
def test_two_workers_answer_on_one_port_and_one_of_them_sweeps(tmp_path):
    with throwaway_database("postgresql") as url:
        server = Served(tmp_path, _env(tmp_path, url, reaper_interval_seconds="0.2",
                                      dispatch_lost_after_seconds="0", infra_backoff_base_seconds="0"),
                        "--workers", "2")
        try:
            assert server.wait_healthy().status_code == 200
            with httpx.Client(base_url=server.url, timeout=30) as http:
                token = http.post("/auth/token", json={"username": "admin", "password": PASSWORD}).json()
                operator = bearer(token["access_token"])
                http.post("/v1/runs", headers=operator, json={"dag_id": "d", "run_id": "r", "tasks": [
                    task("t")]}).raise_for_status()
                worker = bearer(http.post("/v1/seats/s/executions", headers=operator, json={
                    "swarm": "w", "runtime_backend": "local"}).json()["worker_token"])
                for _ in range(40):  # both processes answer (connections are spread by the kernel)
                    with httpx.Client(base_url=server.url) as fresh:
                        assert fresh.get("/health").status_code == 200
                claimed = http.post("/v1/dispatch/claim", json={"limit": 1}, headers=worker).json()["items"]
                assert len(claimed) == 1  # never reported running: dispatch-lost at the next sweep
                ti_id = claimed[0]["correlation"]["ti_id"]
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    attempts = http.get(f"/v1/task-instances/{ti_id}/attempts", headers=operator).json()["items"]
                    if attempts[0]["state"] != "queued":
                        break
                    time.sleep(0.1)
                assert attempts[0]["reason"] == "dispatch_lost"
            time.sleep(1)  # several sweep intervals of both processes
            assert server.output.count("runs the reaper's sweeps") == 1, server.output
            assert server.output.count("Started server process") == 2, server.output
        finally:
            server.stop()
        engine = create_engine(url)
        with engine.connect() as conn:  # the lost attempt was marked once: one re-place, one record
            infra = conn.execute(text("SELECT infra_attempts FROM task_instances")).scalar_one()
            records = conn.execute(text("SELECT count(*) FROM task_attempts WHERE reason = 'dispatch_lost'")).scalar()
        engine.dispose()
        assert (infra, records) == (1, 1)


def test_more_than_one_worker_on_sqlite_is_refused(tmp_path):
    output = _refused(tmp_path, _env(tmp_path, None), "--workers", "2")
    assert "--workers 2 refused: SQLite serves from one process" in output


@needs_postgres
def test_a_connection_budget_beyond_max_connections_is_refused(tmp_path):
    with throwaway_database("postgresql") as url:
        engine = create_engine(url)
        with engine.connect() as conn:
            max_connections = int(conn.execute(text("SHOW max_connections")).scalar_one())
        engine.dispose()
        pool = max_connections // 2  # two processes of pool + 1 listener each: past max_connections
        output = _refused(tmp_path, _env(tmp_path, url, database_pool_size=str(pool), database_max_overflow="0"),
                          "--workers", "2")
    assert f"--workers 2 refused: 2 processes may open {2 * (pool + 1)} database connections" in output
    assert "max_connections" in output


def _max_connections(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SHOW max_connections")).scalar_one())
    finally:
        engine.dispose()


@needs_postgres
def test_each_of_several_replicas_keeps_to_its_share_of_the_budget(tmp_path):
    """One process that fits max_connections alone is refused as one of three servers sharing it."""
    with throwaway_database("postgresql") as url:
        share = (_max_connections(url) - 10) // 3
        pool = share  # pool + 1 listener: past a third, well within the whole
        env = _env(tmp_path, url, database_pool_size=str(pool), database_max_overflow="0", server_replicas="3")
        output = _refused(tmp_path, env, "--workers", "1")
        alone = Served(tmp_path, {**env, "FENCELINE_SERVER_REPLICAS": "1"}, "--workers", "1")
        try:
            assert alone.wait_healthy().status_code == 200
        finally:
            alone.stop()
    assert f"divided among FENCELINE_SERVER_REPLICAS=3 servers ({share})" in output


def test_a_served_app_sets_what_it_was_built_of_aside_from_the_collector(tmp_path):
    """Each serving process freezes the objects its app was built of (app/main.py served_app):
    full collections no longer walk them; young collections come every
    FENCELINE_GC_YOUNG_THRESHOLD allocations, and each collection is timed."""
    assert gc.get_freeze_count() == 0
    threshold, callbacks = gc.get_threshold(), list(gc.callbacks)
    try:
        settings = app_settings(f"sqlite:///{tmp_path / 'fenceline.db'}", gc_young_threshold=5000)
        app = served_app(settings)
        assert gc.get_freeze_count() > 100_000
        assert gc.get_threshold() == (5000, *threshold[1:])
        assert len(gc.callbacks) == len(callbacks) + 1
        assert "/v1/attempts/batch" in app.openapi()["paths"]
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
        gc.callbacks[:] = callbacks
