"""Migration 0015 (the kept counts): it seeds a populated database exactly, its way down leaves
no trigger behind, and the release before it (head 0014) keeps serving a database it moved
ahead, its writes counted by the triggers while nothing folds them."""

import subprocess
import sys
import uuid

import pytest
from sqlalchemy import inspect, text
from sqlmodel import Session

from app.db.engine import make_engine
from app.ops.migrate import downgrade, upgrade
from app.orchestration.models import DagRun, TaskInstance
from tests.support.counts import KEPT_COUNTS, counted, deltas, fold, kept
from tests.support.databases import BACKENDS, throwaway_database
from tests.support.releases import release_before

MIGRATION = "migrations/versions/0015_task_instance_counts.py"
STATES = ("success", "failed", "running", "none")
# The release before's own app and test helpers, on the database it is given (argv).
OLDER_RELEASE_WORKS = """
import sys
from fastapi.testclient import TestClient
from app.main import create_app
from tests.support.api import Operator, Worker, task
from tests.support.settings import app_settings
with TestClient(create_app(app_settings(sys.argv[1]))) as client:
    assert client.get("/health/ready").json()["checks"]["schema"] == "ok"
    operator = Operator(client)
    operator.create_run(task("a", retries=1), task("b", "a"), task("m", map_index=0), dag_id="older", run_id="r")
    worker = Worker(operator, "older-worker")
    for attempt in worker.claim(10):
        attempt.report("failed" if attempt.task_id == "a" else "success")
    operator.reap()
    for attempt in worker.claim(10):
        attempt.report("success")
    assert operator.post("/v1/runs/older/r/cancel").status_code in (200, 409)
"""


def populate(url: str, runs: int = 12) -> None:
    """Runs of several DAGs with task instances in several states, mapped ones among them."""
    engine = make_engine(url)
    try:
        with Session(engine) as session:
            for n in range(runs):
                run = DagRun(dag_id=f"dag{n % 3}", run_id=f"r{n}", trace_id=uuid.uuid4().hex)
                session.add(run)
                session.flush()
                for t in range(5):
                    session.add(TaskInstance(dag_run_id=run.id, dag_id=run.dag_id, run_id=run.run_id, task_id=f"t{t}",
                                             map_index=t - 3 if t >= 3 else -1, state=STATES[(n + t) % 4]))
            session.commit()
    finally:
        engine.dispose()


def triggers(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            if url.startswith("sqlite"):
                query = "SELECT name FROM sqlite_master WHERE type = 'trigger'"
            else:
                query = "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"
            return set(conn.execute(text(query)).scalars())
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
class TestTheMigration:
    def test_seeds_a_populated_database_exactly(self, backend, tmp_path):
        with throwaway_database(backend, tmp_path) as url:
            upgrade(url, "0014")
            populate(url)
            upgrade(url)
            engine = make_engine(url)
            try:
                assert deltas(engine) == 0 and len(counted(engine)) > 10
                assert kept(engine, with_deltas=False) == counted(engine)
            finally:
                engine.dispose()

    def test_the_way_down_and_up_again(self, backend, tmp_path):
        with throwaway_database(backend, tmp_path) as url:
            upgrade(url)
            assert len(triggers(url)) == 3
            downgrade(url, "0014")
            assert triggers(url) == set()
            engine = make_engine(url)
            try:
                assert not set(KEPT_COUNTS) & set(inspect(engine).get_table_names())
            finally:
                engine.dispose()
            populate(url)  # writes without the triggers
            upgrade(url)
            engine = make_engine(url)
            try:
                assert kept(engine) == counted(engine)
            finally:
                engine.dispose()

    def test_the_release_before_keeps_serving_and_its_writes_are_counted(self, backend, tmp_path):
        root = release_before(tmp_path, MIGRATION)
        if root is None:
            pytest.skip("the release before is taken from the git history")
        with throwaway_database(backend, tmp_path) as url:
            upgrade(url, "0014")
            populate(url, runs=3)
            upgrade(url)
            done = subprocess.run([sys.executable, "-c", OLDER_RELEASE_WORKS, url], cwd=root, capture_output=True,
                                  text=True, timeout=120, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
            assert done.returncode == 0, done.stderr[-3000:]
            engine = make_engine(url)
            try:
                assert deltas(engine) > 0  # nothing folded them: its sweep does not
                assert kept(engine) == counted(engine)
                assert ("older", "success", True) in counted(engine)
                fold(engine)
                assert deltas(engine) == 0 and kept(engine, with_deltas=False) == counted(engine)
            finally:
                engine.dispose()
