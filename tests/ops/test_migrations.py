"""The Alembic chain goes up, down and up again on both databases, and the models match it."""

import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import JSON, Boolean, Engine, Integer, String, Uuid, column, inspect, table, text

from app.db.engine import make_engine
from app.db.types import UTCDateTime, metadata
from app.ops.migrate import downgrade, upgrade
from tests.support.databases import BACKENDS, throwaway_database

RUN_ID, TI_ID = uuid.uuid4(), uuid.uuid4()
NOW = datetime(2026, 11, 30, tzinfo=UTC)
NOT_NULL_INTS = ("map_index", "retries", "retry_delay_seconds", "max_infra_attempts", "try_number", "max_tries",
                 "attempt_epoch", "infra_attempts")
NOT_NULL_FLAGS = ("idempotent", "user_code_started")


def cols(**types):
    return [column(name, type_()) for name, type_ in types.items()]


def schema_diff(engine: Engine) -> list:
    """What Alembic's autogenerate would write to make the database match the models."""
    with engine.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)


def tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names()) - {"alembic_version"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_up_down_and_up_again(backend, tmp_path):
    with throwaway_database(backend, tmp_path) as url:
        engine = make_engine(url)
        try:
            upgrade(url)
            assert tables(engine) == set(metadata.tables)
            downgrade(url, "base")
            assert tables(engine) == set()
            upgrade(url)
            assert tables(engine) == set(metadata.tables)
            assert schema_diff(engine) == []
        finally:
            engine.dispose()


def test_the_models_match_the_migrated_schema(engine):
    assert schema_diff(engine) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_replicas_migrating_at_once_all_succeed(backend, tmp_path):
    """Several `fenceline migrate` processes on one fresh database, as replicas starting
    together run them: each waits its turn and finds the schema at head."""
    with throwaway_database(backend, tmp_path) as url:
        env = {**os.environ, "FENCELINE_DATABASE_URL": url, "FENCELINE_DATA_DIR": str(tmp_path)}
        env.pop("DATABASE_URL", None)
        procs = [subprocess.Popen([sys.executable, "-m", "app.cli", "migrate"], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(4)]
        results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
        assert [code for code, _ in results] == [0, 0, 0, 0], [err[-500:] for _, err in results]
        engine = make_engine(url)
        try:
            assert schema_diff(engine) == []
        finally:
            engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
def test_routing_expands_existing_task_instances_with_airflow_defaults(backend, tmp_path):
    """0008 only adds: a task instance written before it gets queue `default`, pool
    `default_pool`, one slot, weight 1 and its run's tenant, and the default pool has Airflow's
    128 slots."""
    with throwaway_database(backend, tmp_path) as url:
        engine = make_engine(url)
        try:
            upgrade(url, "0007")
            with engine.begin() as conn:  # the 0007 columns only, as a replica before 0008 writes them
                conn.execute(table("dag_runs", *cols(id=Uuid, dag_id=String, run_id=String, state=String,
                                                     tenant_id=String, trace_id=String, conf=JSON,
                                                     created_at=UTCDateTime, updated_at=UTCDateTime)).insert().values(
                    id=RUN_ID, dag_id="d", run_id="r", state="running", tenant_id="acme", trace_id="t", conf={},
                    created_at=NOW, updated_at=NOW))
                conn.execute(table("task_instances", *cols(
                    id=Uuid, dag_run_id=Uuid, dag_id=String, run_id=String, task_id=String, payload=JSON,
                    upstream_task_ids=JSON, state=String, created_at=UTCDateTime, updated_at=UTCDateTime,
                    **dict.fromkeys(NOT_NULL_INTS, Integer), **dict.fromkeys(NOT_NULL_FLAGS, Boolean),
                )).insert().values(id=TI_ID, dag_run_id=RUN_ID, dag_id="d", run_id="r", task_id="t", payload={},
                                   upstream_task_ids=[], state="scheduled", created_at=NOW, updated_at=NOW,
                                   **dict.fromkeys(NOT_NULL_INTS, 0), **dict.fromkeys(NOT_NULL_FLAGS, False)))
            upgrade(url)
            with engine.connect() as conn:
                ti = conn.execute(text(
                    "SELECT queue, pool, pool_slots, priority_weight, tenant_id FROM task_instances")).one()
                pools = conn.execute(text("SELECT name, slots FROM pools")).all()
            assert tuple(ti) == ("default", "default_pool", 1, 1, "acme")  # and the run's tenant
            assert [tuple(p) for p in pools] == [("default_pool", 128)]
            downgrade(url, "0007")
            upgrade(url)
            assert schema_diff(engine) == []
        finally:
            engine.dispose()


def index_names(engine: Engine) -> set[str]:
    """The task instances' indexes, expression indexes included (reflection skips those)."""
    postgres = engine.dialect.name == "postgresql"
    query = ("SELECT indexname FROM pg_indexes WHERE tablename = 'task_instances'" if postgres
             else "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'task_instances'")
    with engine.connect() as conn:
        return set(conn.execute(text(query)).scalars())


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_claims_partial_indexes_and_a_tries_history_survive_down_and_up(backend, tmp_path):
    """0009's partial indexes (one on an expression, which SQLite's batch mode cannot copy) and
    0010's flag: a task instance written before them is judged for readiness as before (true)
    and keeps its archived tries, also after going down (through a batch-mode copy of the
    table, whose foreign keys must not cascade) and up again."""
    with throwaway_database(backend, tmp_path) as url:
        engine = make_engine(url)
        try:
            upgrade(url, "0008")
            with engine.begin() as conn:
                conn.execute(text("INSERT INTO dag_runs (id, dag_id, run_id, state, trace_id, conf, created_at, "
                                  "updated_at) VALUES (:id, 'd', 'r', 'running', 't', '{}', :now, :now)"),
                             {"id": RUN_ID.hex if backend == "sqlite" else RUN_ID, "now": NOW})
                conn.execute(table("task_instances", *cols(
                    id=Uuid, dag_run_id=Uuid, dag_id=String, run_id=String, task_id=String, payload=JSON,
                    upstream_task_ids=JSON, state=String, created_at=UTCDateTime, updated_at=UTCDateTime,
                    **dict.fromkeys(NOT_NULL_INTS, Integer), **dict.fromkeys(NOT_NULL_FLAGS, Boolean),
                )).insert().values(id=TI_ID, dag_run_id=RUN_ID, dag_id="d", run_id="r", task_id="t", payload={},
                                   upstream_task_ids=[], state="running", created_at=NOW, updated_at=NOW,
                                   **dict.fromkeys(NOT_NULL_INTS, 1), **dict.fromkeys(NOT_NULL_FLAGS, False)))
                conn.execute(table("task_instance_history", *cols(
                    id=Uuid, task_instance_id=Uuid, try_number=Integer, attempt_epoch=Integer, state=String,
                    infra_attempts=Integer)).insert().values(
                    id=uuid.uuid4(), task_instance_id=TI_ID, try_number=1, attempt_epoch=0, state="failed",
                    infra_attempts=0))
            claim_indexes = {"ix_task_instances_ready", "ix_task_instances_in_flight"}
            for _ in range(2):
                upgrade(url)
                assert claim_indexes <= index_names(engine)
                assert "ix_task_instances_state_queue_pool" not in index_names(engine)
                with engine.connect() as conn:
                    assert conn.execute(text("SELECT has_downstream FROM task_instances")).scalar_one()
                    assert conn.execute(text("SELECT count(*) FROM task_instance_history")).scalar_one() == 1
                downgrade(url, "0007")  # 0008's way down copies task_instances (SQLite's batch mode)
                assert not claim_indexes & index_names(engine)
                with engine.connect() as conn:
                    assert conn.execute(text("SELECT count(*) FROM task_instance_history")).scalar_one() == 1
        finally:
            engine.dispose()


@pytest.mark.postgres_only("fillfactor is a PostgreSQL storage parameter")
def test_task_instances_leave_room_for_heartbeats_and_give_it_back_going_down(db_url, tmp_path):
    """0011: heartbeats stay HOT updates (the page has room for the row's new version)."""
    with throwaway_database("postgresql", tmp_path) as url:
        engine = make_engine(url)
        options = text("SELECT reloptions FROM pg_class WHERE relname = 'task_instances'")
        try:
            upgrade(url)
            with engine.connect() as conn:
                assert conn.execute(options).scalar_one() == ["fillfactor=70"]
            downgrade(url, "0010")
            with engine.connect() as conn:
                assert conn.execute(options).scalar_one() is None
        finally:
            engine.dispose()
