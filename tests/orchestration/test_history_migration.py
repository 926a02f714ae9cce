"""Revision 0003 is expand-only: a replica still running revision 0002's code keeps archiving
tries into the upgraded schema during a rolling upgrade (its statement names no attempt_epoch),
up to the first contract migration, 0013, which swaps the key its ON CONFLICT names."""

import uuid
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from app.db.engine import make_engine
from app.ops.migrate import upgrade
from tests.support.databases import BACKENDS, throwaway_database

# Revision 0002's archive statement, verbatim in shape: no attempt_epoch.
ARCHIVE_0002 = sa.text(
    "INSERT INTO task_instance_history (id, task_instance_id, try_number, state, infra_attempts, "
    "last_failure_kind, last_failure_reason, execution_id, queued_at, started_at, ended_at) "
    "VALUES (:id, :ti_id, :try_number, :state, 0, 'app', NULL, NULL, NULL, NULL, :ended_at) "
    "ON CONFLICT (task_instance_id, try_number) DO NOTHING"
).bindparams(sa.bindparam("id", type_=sa.Uuid), sa.bindparam("ti_id", type_=sa.Uuid),
             sa.bindparam("ended_at", type_=sa.DateTime(timezone=True)))

RUNS = sa.table("dag_runs", *(sa.column(c) for c in ("dag_id", "run_id", "state", "trace_id")),
                sa.column("id", sa.Uuid), sa.column("conf", sa.JSON),
                sa.column("created_at", sa.DateTime(timezone=True)),
                sa.column("updated_at", sa.DateTime(timezone=True)))
TIS_0002 = sa.table(
    "task_instances", sa.column("id", sa.Uuid), sa.column("dag_run_id", sa.Uuid),
    sa.column("payload", sa.JSON), sa.column("upstream_task_ids", sa.JSON),
    sa.column("created_at", sa.DateTime(timezone=True)), sa.column("updated_at", sa.DateTime(timezone=True)),
    *(sa.column(c) for c in ("dag_id", "run_id", "task_id", "map_index", "retries", "retry_delay_seconds",
                             "max_infra_attempts", "idempotent", "state", "try_number", "max_tries",
                             "infra_attempts", "user_code_started")))


def archive(conn: sa.Connection, ti_id: uuid.UUID, try_number: int, state: str) -> None:
    conn.execute(ARCHIVE_0002, {"id": uuid.uuid4(), "ti_id": ti_id, "try_number": try_number, "state": state,
                                "ended_at": datetime.now(UTC)})


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_previous_revisions_archive_statement_works_on_the_upgraded_schema(backend, tmp_path):
    with throwaway_database(backend, tmp_path) as url:
        upgrade(url, "0002")
        engine = make_engine(url)
        run_id, ti_id, now = uuid.uuid4(), uuid.uuid4(), datetime.now(UTC)
        try:
            with engine.begin() as conn:
                conn.execute(RUNS.insert().values(id=run_id, dag_id="d", run_id="r", state="running", trace_id="t",
                                                  conf={}, created_at=now, updated_at=now))
                conn.execute(TIS_0002.insert().values(
                    id=ti_id, dag_run_id=run_id, dag_id="d", run_id="r", task_id="a", map_index=-1, payload={},
                    upstream_task_ids=[], retries=1, retry_delay_seconds=0, max_infra_attempts=3, idempotent=True,
                    state="running", try_number=2, max_tries=1, infra_attempts=0, user_code_started=True,
                    created_at=now, updated_at=now))
                archive(conn, ti_id, 1, "failed")
            engine.dispose()
            upgrade(url, "0012")  # the schema releases before 0013 serve: every migration up to it only adds
            with engine.begin() as conn:
                archive(conn, ti_id, 2, "success")
                archive(conn, ti_id, 2, "failed")  # a re-delivered archive of the same try does nothing
            upgrade(url, "head")  # 0013 swaps the key: why it is a contract migration, applied after them
            with pytest.raises(sa.exc.DBAPIError), engine.begin() as conn:
                archive(conn, ti_id, 3, "failed")
            with engine.connect() as conn:
                history = conn.execute(sa.text(
                    "SELECT try_number, attempt_epoch, state FROM task_instance_history ORDER BY try_number")).all()
                epoch = conn.execute(sa.text("SELECT attempt_epoch FROM task_instances")).scalar_one()
            assert [tuple(row) for row in history] == [(1, 0, "failed"), (2, 0, "success")]
            assert epoch == 0
        finally:
            engine.dispose()
