"""Real worker processes (`python -m app.cli worker`) against a real server on a loopback port.

The worker is an HTTP client only, so these tests run on SQLite alone (tests/support/agents.py).
"""

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.worker.process import group_alive
from tests.support.agents import SQLITE_ONLY, WorkerProcess
from tests.support.api import ADMIN_PASSWORD
from tests.support.servers import LiveServer, clean_env, live_servers


@pytest.fixture
def server(request: pytest.FixtureRequest, db_url: str) -> LiveServer:
    """The module's live server (tests/conftest.py, live_server). SQLite only: see the module
    docstring."""
    if not db_url.startswith("sqlite"):
        pytest.skip(SQLITE_ONLY)
    return request.getfixturevalue("live_server")


@pytest.fixture
def serve(db_url: str, engine: Any) -> Iterator[Callable[..., LiveServer]]:
    """Start a live server of the test's own, with setting overrides (on `port`, to bring one
    back after a stop); stopped at teardown. SQLite only: see the module docstring."""
    if not db_url.startswith("sqlite"):
        pytest.skip(SQLITE_ONLY)
    with live_servers(db_url) as start:
        yield start


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start worker processes; any still running at teardown are killed, with their tasks."""
    started: list[WorkerProcess] = []
    env = {**clean_env(), "FENCELINE_ADMIN_PASSWORD": ADMIN_PASSWORD}

    def start(server: LiveServer, seat: str, *flags: str, state: str | None = None,
              extra_env: dict[str, str] | None = None) -> WorkerProcess:
        worker = WorkerProcess(server.url, seat, tmp_path / (state or seat), {**env, **(extra_env or {})}, *flags)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.proc.poll() is None:
            worker.kill()
        for record in worker.attempt_records():
            if record.get("pgid") and group_alive(record["pgid"]):
                os.killpg(record["pgid"], signal.SIGKILL)
