"""The log store's disk (contract 4.1): full is 507 log-store-full, read-only or failing is 503
log-store-unavailable; nothing is recorded, the connection stays open, and each is counted."""

import errno
import http.client
import json

import pytest

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
