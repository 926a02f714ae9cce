"""The history's key swap, migration 0013: the first contract migration (contract 10.2). This
release archives a try once on either key (its code works before its own contract step);
`fenceline migrate` stops before 0013, `--contract` applies it while no older replica is alive,
and the way down keeps a try's latest row."""

import uuid
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import inspect, text
from sqlmodel import Session

from app.db.engine import make_engine
from app.db.types import utcnow
from app.fleet import replicas
from app.main import create_app
from app.ops.migrate import downgrade, head_revision, migrate, schema_revision, serving_refusal, upgrade
from app.ops.startup import CONTRACT_REFUSED, StartupError
from tests.support.api import Operator, Worker, task, ti_ids
from tests.support.databases import BACKENDS, throwaway_database
from tests.support.releases import database_env, run_release
from tests.support.settings import app_settings

PER_TRY, PER_EPOCH = ["task_instance_id", "try_number"], ["task_instance_id", "try_number", "attempt_epoch"]


def history_key(url: str) -> list[str]:
    engine = make_engine(url)
    try:
        (key,) = inspect(engine).get_unique_constraints("task_instance_history")
        return key["column_names"]
    finally:
        engine.dispose()


def history(url: str, ti_id: str) -> list[tuple]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return [tuple(row) for row in conn.execute(text(
                "SELECT try_number, attempt_epoch, state FROM task_instance_history WHERE task_instance_id = :ti "
                "ORDER BY try_number, attempt_epoch"), {"ti": uuid.UUID(ti_id).hex if url.startswith("sqlite")
                                                          else uuid.UUID(ti_id)})]
    finally:
        engine.dispose()


def archives_once_per_try(url: str, run_id: str, *, ready: bool = True) -> None:
    """This release's app on `url`: ready (not `ready`: refusing until the contract step); a try
    failed for retry and then marked failed (two archives of try 1, at two epochs) keeps one row,
    and a success (the success rail's own archive statement) writes one."""
    with TestClient(create_app(app_settings(url))) as client:
        schema = client.get("/health/ready").json()["checks"]["schema"]
        assert schema == "ok" if ready else "--contract" in schema
        operator = Operator(client)
        run = operator.create_run(task("a", retries=1), task("b"), run_id=run_id)
        for attempt in Worker(operator, f"w-{run_id}").claim(5):
            attempt.report("failed" if attempt.task_id == "a" else "success")
        a, b = ti_ids(run)["a"], ti_ids(run)["b"]
        assert operator.post(f"/v1/task-instances/{a}/mark", json={"state": "failed"}).status_code == 200
        assert operator.ti(a)["attempt_epoch"] == 2  # the mark fenced the try off with a new epoch
        assert history(url, a) == [(1, 1, "failed")]  # archived once (epoch 1): the mark's archive did nothing
        assert history(url, b) == [(1, 1, "success")]


@pytest.mark.parametrize("backend", BACKENDS)
class TestTheSwap:
    def test_the_archive_works_before_and_after_it(self, backend, tmp_path):
        with throwaway_database(backend, tmp_path) as url:
            upgrade(url, "0012")  # served by the release of 0013; this one's expand step 0014 waits behind 0013
            assert "--contract" in serving_refusal(url) and history_key(url) == PER_TRY
            archives_once_per_try(url, "before", ready=False)  # the statement both releases run
            migrate(url, contract=True)
            assert schema_revision(url) == head_revision() and history_key(url) == PER_EPOCH
            archives_once_per_try(url, "after")

    def test_migrate_stops_before_it_and_contract_applies_it(self, backend, tmp_path):
        with throwaway_database(backend, tmp_path) as url:
            env = database_env(url, tmp_path / "data")
            upgrade(url, "0011")
            done = run_release(None, "migrate", env=env)  # 0012 applied; 0014 waits behind 0013, so it ends refused
            assert done.returncode == 5 and "--contract" in done.stderr, done.stderr
            assert schema_revision(url) == "0012" and history_key(url) == PER_TRY
            assert "0013" in done.stdout
            # 0014, this release's index step, waits behind 0013: the init container refuses until --contract
            done = run_release(None, "migrate", "--check", env=env)
            assert done.returncode == 5 and "--contract" in done.stderr, done.stderr
            done = run_release(None, "migrate", "--contract", env=env)
            assert done.returncode == 0, done.stderr
            assert schema_revision(url) == head_revision() and history_key(url) == PER_EPOCH
            done = run_release(None, "migrate", "--contract", env=env)
            assert done.returncode == 0 and "nothing to contract" in done.stdout, done.stderr

    def test_contract_waits_for_a_replica_of_the_release_before(self, backend, tmp_path):
        with throwaway_database(backend, tmp_path) as url:
            upgrade(url, "0012")
            engine = make_engine(url)
            older = replicas.Me.starting("0.9", "0012", 5)  # the release before: its head is 0012
            try:
                with Session(engine) as session:
                    replicas.seen(session=session, me=older, now=utcnow())
                    session.commit()
                with pytest.raises(StartupError) as refused:
                    migrate(url, contract=True)
                assert refused.value.status == CONTRACT_REFUSED and "0012" in str(refused.value)
                assert schema_revision(url) == "0012"
                with Session(engine) as session:  # its row left the liveness window
                    replicas.seen(session=session, me=older, now=utcnow() - timedelta(seconds=21))
                    session.commit()
            finally:
                engine.dispose()
            migrate(url, contract=True)
            assert schema_revision(url) == head_revision()

    def test_down_keeps_a_tries_latest_row_and_up_again(self, backend, tmp_path):
        """A later release's per-epoch rows: going down keeps each try's latest epoch's row,
        which reads show for the try, so the old key can be made again."""
        with throwaway_database(backend, tmp_path) as url:
            upgrade(url)
            archives_once_per_try(url, "r")
            engine = make_engine(url)
            try:
                with engine.begin() as conn:  # what a later release writes: a row per epoch of try 1
                    conn.execute(text(
                        "INSERT INTO task_instance_history (id, task_instance_id, try_number, attempt_epoch, state, "
                        "infra_attempts) SELECT :id, task_instance_id, try_number, 2, 'failed', 0 "
                        "FROM task_instance_history WHERE state = 'failed'"),
                        {"id": uuid.uuid4().hex if backend == "sqlite" else uuid.uuid4()})
                with engine.connect() as conn:
                    count = text("SELECT count(*) FROM task_instance_history")
                    assert conn.execute(count).scalar_one() == 3
            finally:
                engine.dispose()
            downgrade(url, "0012")
            assert history_key(url) == PER_TRY
            engine = make_engine(url)
            try:
                with engine.connect() as conn:
                    rows = conn.execute(text("SELECT try_number, attempt_epoch, state FROM task_instance_history "
                                             "ORDER BY state")).all()
            finally:
                engine.dispose()
            assert [tuple(r) for r in rows] == [(1, 2, "failed"), (1, 1, "success")]
            upgrade(url)
            assert history_key(url) == PER_EPOCH
