"""The log store's disk (contract 4.1): full is 507 log-store-full, read-only or failing is 503
log-store-unavailable; nothing is recorded, the connection stays open, and each is counted."""

import errno
import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from app.logs.stores.base import LogStoreUnavailable
from app.main import create_app
from tests.support.api import Operator, Worker, assert_problem
from tests.support.filesystems import FailingStore, LogDisk, tmpfs
from tests.support.scrape import sample
from tests.support.servers import LiveServer
from tests.support.settings import app_settings


@pytest.fixture
def disk(make_client):
    """A client whose log store lives on a 1 MiB tmpfs (or, where none can be mounted, on the
    test data directory with faults injected), and that file system."""
    with tmpfs("1m") as mount:
        client = make_client(log_store="file", **({"log_dir": mount} if mount else {}))
        yield LogDisk(client.app, mount), Operator(client)


def running_attempt(operator):
    operator.create_run()
    attempt = Worker(operator).claim_one()
    attempt.report("running")
    return attempt


def store_errors(operator, reason: str) -> float:
    return sample(operator, "fenceline_log_store_errors_total", reason=reason)


class TestFullStore:
    def test_507_records_nothing_and_is_counted(self, disk):
        disk, operator = disk
        attempt = running_attempt(operator)
        attempt.append_log(0, "first\n")
        before = operator.log(attempt.ti_id)
        counted = store_errors(operator, "enospc")
        disk.fill(leave=4096)  # room for part of the chunk: the part must not stay either
        assert_problem(attempt.send_log(6, "x" * 100_000), 507, "log-store-full")
        assert operator.log(attempt.ti_id) == before
        assert store_errors(operator, "enospc") == counted + 1
        disk.free()
        assert attempt.append_log(6, "x" * 100_000) == {"size": 100_006}

    def test_a_stream_the_failed_append_would_have_started_is_not_left_behind(self, disk):
        disk, operator = disk
        attempt = running_attempt(operator)
        disk.fill()
        assert_problem(attempt.send_log(0, "hello\n"), 507, "log-store-full")
        assert disk.store.size(f"dag/run/t/-1/1.e{attempt.epoch}.log") is None
        disk.free()
        assert attempt.append_log(0, "hello\n") == {"size": 6}
        assert operator.log(attempt.ti_id).count("hello") == 1


class TestUnavailableStore:
    def test_a_read_only_store_is_503_and_records_nothing(self, disk):
        disk, operator = disk
        attempt = running_attempt(operator)
        before, counted = operator.log(attempt.ti_id), store_errors(operator, "erofs")
        disk.read_only()
        resp = attempt.send_log(0, "line\n")
        assert_problem(resp, 503, "log-store-unavailable")
        assert resp.headers["retry-after"] == "5"
        assert operator.log(attempt.ti_id) == before
        assert store_errors(operator, "erofs") == counted + 1

    def test_an_io_error_is_503(self, make_client):
        """No file system a test can mount fails with EIO on demand: injected at the store."""
        client = make_client(log_store="file")
        attempt = running_attempt(Operator(client))
        client.app.state.log_store = FailingStore(client.app.state.log_store, errno.EIO)
        assert_problem(attempt.send_log(0, "line\n"), 503, "log-store-unavailable")


def test_the_connection_stays_open(db_url, engine):
    app = create_app(app_settings(db_url, log_store="file"))
    with LiveServer(app) as server:
        attempt = running_attempt(Operator(server.client()))
        app.state.log_store = FailingStore(app.state.log_store, errno.ENOSPC)
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.connect()
        conn.auto_open = 0  # a second request must go over this very connection
        conn.request("POST", "/v1/attempts/logs", json.dumps({"offset": 0, "content": "x"}),
                     {**attempt.headers, "Content-Type": "application/json"})
        first = conn.getresponse()
        assert (first.status, json.loads(first.read())["type"]) == (507, "log-store-full")
        conn.request("GET", "/health")
        assert conn.getresponse().status == 200
        conn.close()


class ReadFailingStore:
    """A log store whose reads fail with the store's fault: at once (`after` None, the store
    down), or once `after` pieces of a stream were read (the store lost midway)."""

    def __init__(self, store: Any, after: int | None = None) -> None:
        self.store, self.after = store, after

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def read(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        if self.after is None:
            raise LogStoreUnavailable("the bucket cannot be reached: injected", "bucket_unavailable")
        for n, piece in enumerate(self.store.read(key, start, end)):
            if n >= self.after:
                raise LogStoreUnavailable("the bucket cannot be reached: injected", "bucket_unavailable")
            yield piece


class TestUnreadableStore:
    """Issue 30, item 7: a read that cannot start is 503 with a read's wording; a read that fails
    midway aborts the connection, never ends the body as if it were complete."""

    @pytest.fixture(scope="class")
    def server(self, db_url, engine):
        app = create_app(app_settings(db_url, log_store="file"))
        with LiveServer(app) as server:
            yield server

    def logged_attempt(self, server):
        operator = Operator(server.client())
        attempt = running_attempt(operator)
        for n in range(4):
            attempt.append_log(n * 300_000, "x" * 299_999 + "\n")
        return operator, attempt

    def test_a_read_that_cannot_start_is_503_saying_so(self, server):
        operator, attempt = self.logged_attempt(server)
        store, server.app.state.log_store = server.app.state.log_store, ReadFailingStore(server.app.state.log_store)
        try:
            native = assert_problem(operator.get(f"/v1/task-instances/{attempt.ti_id}/tries/1/log"), 503,
                                    "log-store-unavailable")
            airflow = operator.get(f"/api/v2/dags/dag/dagRuns/run/taskInstances/{attempt.task_id}/logs/1")
            assert airflow.status_code == 503  # in Airflow 3's shape: {"detail": ...}
            for detail in (native["detail"], airflow.json()["detail"]):
                assert "cannot be read now" in detail and "written" not in detail
        finally:
            server.app.state.log_store = store

    def test_a_read_that_fails_midway_aborts_the_response(self, server):
        operator, attempt = self.logged_attempt(server)
        store, server.app.state.log_store = server.app.state.log_store, ReadFailingStore(server.app.state.log_store, 1)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            conn.request("GET", f"/v1/task-instances/{attempt.ti_id}/tries/1/log", headers=operator.headers)
            resp = conn.getresponse()
            assert resp.status == 200
            with pytest.raises(http.client.IncompleteRead):
                resp.read()
            conn.close()
        finally:
            server.app.state.log_store = store
        assert len(operator.log(attempt.ti_id)) > 1_200_000  # whole again once the store reads
