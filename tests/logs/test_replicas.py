"""Two `fenceline serve` processes on one PostgreSQL, each with its own data directory (two
machines, no shared disk): what an attempt appends through one is read, complete, through the
other — with the database store and with an S3 store."""

import uuid

import httpx
import pytest

from tests.support.api import ADMIN_PASSWORD, Operator, Worker
from tests.support.servers import Served, clean_env
from tests.support.settings import JWT_SECRET


@pytest.fixture(params=["database", "s3"])
def shared_store(request) -> str:
    if request.param == "s3":
        return f"s3://{request.getfixturevalue('s3_bucket')}/{uuid.uuid4().hex[:12]}"
    return "database"


@pytest.fixture
def replicas(db_url, engine, shared_store, tmp_path):
    servers = []
    for name in ("a", "b"):
        env = {**clean_env(tmp_path / name), "FENCELINE_DATABASE_URL": db_url, "FENCELINE_LOG_STORE": shared_store,
               "FENCELINE_ADMIN_PASSWORD": ADMIN_PASSWORD, "FENCELINE_JWT_SECRET": JWT_SECRET,
               "FENCELINE_REAPER_INTERVAL_SECONDS": "0"}
        servers.append(Served(tmp_path, env))
    try:
        for server in servers:
            server.wait_healthy()
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.mark.postgres_only("replicas on several machines share a PostgreSQL database")
def test_a_log_appended_through_one_replica_is_read_whole_through_the_other(replicas, tmp_path):
    one, two = replicas
    lines = [f"line {n:04d} " + "x" * (n % 50) + "\n" for n in range(3000)]
    with httpx.Client(base_url=one.url, timeout=60) as a, httpx.Client(base_url=two.url, timeout=60) as b:
        operator = Operator(a)
        operator.create_run()
        attempt = Worker(operator).claim_one()
        attempt.report("running")
        offset = 0
        for start in range(0, len(lines), 500):
            offset = attempt.append_log(offset, "".join(lines[start:start + 500]))["size"]
        attempt.report("success")
        reader = Operator(b)
        text = reader.log(attempt.ti_id)
        assert text.splitlines(keepends=True)[1:] == lines
        airflow = reader.get("/api/v2/dags/dag/dagRuns/run/taskInstances/t/logs/1",
                             headers={"Accept": "application/x-ndjson"})
        assert airflow.status_code == 200 and len(airflow.text.splitlines()) == len(lines) + 1
    assert not any((tmp_path / name / "logs").exists() for name in ("a", "b"))  # nothing on either disk
