"""The worker's writes go in batches (app/worker/coalescer.py), and as single requests to a
server without the route; either way a task runs exactly as before."""

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.responses import JSONResponse

from app.main import create_app
from tests.support.agents import GATED, python_task
from tests.support.api import Operator, json_of
from tests.support.scrape import sample
from tests.support.servers import LiveServer
from tests.support.settings import app_settings
from tests.support.waiting import wait_until


class WithoutBatches:
    """A server of before batches: POST /v1/attempts/batch answers 404, as any unknown route."""

    def __init__(self, app: Any) -> None:
        self.app, self.state = app, app.state  # the live server reaches the app's hub through state
        self.refused = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/v1/attempts/batch":
            self.refused += 1
            await JSONResponse({"type": "not-found", "title": "Not found", "status": 404, "detail": "No route"},
                               status_code=404)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class HoldingRunning:
    """Counts the requests by path, and holds each batch that carries a `running` report until
    `release` is set (the worker waits on its answer)."""

    def __init__(self, app: Any) -> None:
        self.app, self.state = app, app.state
        self.requests: Counter[str] = Counter()
        self.held = 0
        self.release = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/attempts/batch":
            self.requests[scope.get("path", "")] += 1
            await self.app(scope, receive, send)
            return
        self.requests[scope["path"]] += 1
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        if any(e.get("op") == "report" and e.get("state") == "running" for e in json.loads(body)["entries"]):
            self.held += 1
            while not self.release.is_set():
                await asyncio.sleep(0.01)
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def _live(db_url: str, wrap: Any) -> Iterator[tuple[LiveServer, Any]]:
    if not db_url.startswith("sqlite"):
        pytest.skip("worker processes talk HTTP only; covered on SQLite")
    app = wrap(create_app(app_settings(db_url)))
    with LiveServer(app) as server:
        yield server, app


@pytest.fixture
def old_server(db_url: str, engine: Any) -> Iterator[tuple[LiveServer, WithoutBatches]]:
    yield from _live(db_url, WithoutBatches)


@pytest.fixture
def holding_server(db_url: str, engine: Any) -> Iterator[tuple[LiveServer, HoldingRunning]]:
    yield from _live(db_url, HoldingRunning)


# Leaves a mark that its user code ran, naming its try and epoch.
MARKS = """
import os, pathlib, sys
with open(sys.argv[1], "a") as marks:
    marks.write(f"epoch={os.environ['FENCELINE_ATTEMPT_EPOCH']}\\n")
"""


def batched(operator: Operator, op: str) -> float:
    return sum(sample(operator, "fenceline_batch_entries_total", op=op, status=status) for status in ("200", "409"))


def two_tasks(operator: Operator, tmp_path: Any) -> None:
    gate = str(tmp_path / "gate")
    operator.create_run(python_task("a", GATED, gate), python_task("b", GATED, gate))


class TestBatches:
    def test_heartbeats_and_log_chunks_go_in_batches(self, serve, workers, tmp_path):
        server = serve()
        operator = Operator(server.client())
        before = {op: batched(operator, op) for op in ("heartbeat", "log")}
        two_tasks(operator, tmp_path)
        worker = workers(server, "etl-a", "--concurrency", "2")
        wait_until(lambda: batched(operator, "heartbeat") > before["heartbeat"] + 2, "batched heartbeats")
        (tmp_path / "gate").touch()
        wait_until(lambda: operator.run()["state"] == "success", "the run to succeed")
        for ti in operator.run()["task_instances"]:
            assert ti["try_number"] == 1 and ti["attempt_epoch"] == 1
            assert "try=1 epoch=1 done\n" in operator.log(ti["ti_id"])
        assert batched(operator, "log") > before["log"]
        assert worker.stop() == 0


class TestBatchedReports:
    def test_reports_go_in_batches_and_user_code_waits_for_running(self, holding_server, workers, tmp_path):
        server, app = holding_server
        operator = Operator(server.client())
        marks, before = tmp_path / "marks", batched(operator, "report")
        operator.create_run(python_task("t", MARKS, str(marks)))
        worker = workers(server, "etl-a", "--concurrency", "1")
        wait_until(lambda: app.held == 1, "the batch with `running` to be held")
        time.sleep(0.5)  # time enough to start the task, were it not waiting
        assert not marks.exists() and operator.find_ti("t")["state"] == "queued"
        app.release.set()
        wait_until(lambda: operator.run()["state"] == "success", "the run to succeed")
        assert marks.read_text() == "epoch=1\n"
        assert batched(operator, "report") == before + 2  # running and success, each an entry of a batch
        assert app.requests["/v1/attempts/report"] == 0
        assert worker.stop() == 0

    def test_a_stale_running_entry_never_starts_the_task(self, holding_server, workers, tmp_path):
        """The operator clears the task while its `running` waits for an answer: the entry is
        answered stale, the attempt is never started, and the cleared task's next attempt runs."""
        server, app = holding_server
        operator = Operator(server.client())
        marks, stale = tmp_path / "marks", lambda: sample(operator, "fenceline_batch_entries_total", op="report",
                                                          status="409")
        before = stale()
        operator.create_run(python_task("t", MARKS, str(marks)))
        worker = workers(server, "etl-a", "--concurrency", "1")
        wait_until(lambda: app.held == 1, "the batch with `running` to be held")
        json_of(operator.post(f"/v1/task-instances/{operator.find_ti('t')['ti_id']}/clear"))
        app.release.set()
        wait_until(lambda: operator.run()["state"] == "success", "the cleared task to run again and succeed")
        assert marks.read_text() == "epoch=3\n"  # the clear's epoch and the claim's: epoch 1 never ran
        assert "running refused" in worker.output
        assert stale() == before + 1
        assert worker.stop() == 0


class TestFallback:
    def test_a_server_without_batches_gets_single_requests(self, old_server, workers, tmp_path):
        server, app = old_server
        operator = Operator(server.client())
        two_tasks(operator, tmp_path)
        worker = workers(server, "etl-a", "--concurrency", "2")
        wait_until(lambda: all(t["state"] == "running" for t in operator.run()["task_instances"]), "both to run")
        (tmp_path / "gate").touch()
        wait_until(lambda: operator.run()["state"] == "success", "the run to succeed")
        for ti in operator.run()["task_instances"]:
            assert "try=1 epoch=1 done\n" in operator.log(ti["ti_id"])
        assert app.refused == 1  # tried once, then single requests only (reports too)
        assert "single requests from now on" in worker.output
        assert worker.stop() == 0
