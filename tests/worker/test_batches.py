"""The worker's writes go in batches (app/worker/batcher.py), and as single requests to a
server without the route; either way a task runs exactly as before."""

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.responses import JSONResponse

from app.main import create_app
from tests.support.agents import GATED, python_task
from tests.support.api import Operator
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


@pytest.fixture
def old_server(db_url: str, engine: Any) -> Iterator[tuple[LiveServer, WithoutBatches]]:
    if not db_url.startswith("sqlite"):
        pytest.skip("worker processes talk HTTP only; covered on SQLite")
    app = WithoutBatches(create_app(app_settings(db_url)))
    with LiveServer(app) as server:
        yield server, app


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
        assert app.refused == 1  # tried once, then single requests only
        assert "single requests from now on" in worker.output
        assert worker.stop() == 0
