"""Real worker processes (`python -m app.cli worker`) against a real server on a loopback port.

The worker is an HTTP client only, so these tests run on SQLite alone: PostgreSQL adds nothing
to what they check, and every server-side rule they touch is tested on both elsewhere.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from app.main import create_app
from app.worker.process import group_alive
from tests.api import ADMIN_PASSWORD
from tests.conftest import LiveServer, app_settings

REPO = Path(__file__).resolve().parents[2]


def wait_until(check: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    """Poll `check` until it answers something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if result := check():
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


class ServerOnPort(LiveServer):
    """A live server on a given port: the same address again after a stop."""

    def __init__(self, app: Any, port: int) -> None:
        super().__init__(app)
        self.port, self.url = port, f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)


@pytest.fixture
def serve(db_url: str, engine: Any) -> Iterator[Callable[..., LiveServer]]:
    """Start a live server with setting overrides (on `port`, to bring one back after a
    stop); stopped at teardown. SQLite only: see the module docstring."""
    if not db_url.startswith("sqlite"):
        pytest.skip("worker processes talk HTTP only; covered on SQLite")
    with ExitStack() as running:
        def start(port: int | None = None, **overrides: Any) -> LiveServer:
            app = create_app(app_settings(db_url, **overrides))
            return running.enter_context(LiveServer(app) if port is None else ServerOnPort(app, port))

        yield start


class WorkerProcess:
    """`fenceline worker` as a child process, its stderr in a file."""

    def __init__(self, server_url: str, seat: str, state_dir: Path, env: dict[str, str], *flags: str) -> None:
        self.seat, self.state_dir = seat, state_dir
        self.log_path = state_dir.with_name(f"{state_dir.name}-{time.monotonic_ns()}.log")
        args = ["--server", server_url, "--seat", seat, "--state-dir", str(state_dir), "--heartbeat-interval", "0.2",
                "--grace-period", "10", *flags]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "app.cli", "worker", *args], cwd=REPO, env=env,
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    @property
    def output(self) -> str:
        return self.log_path.read_text()

    def attempt_records(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted((self.state_dir / "attempts").glob("*.json"))]

    def journal(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted((self.state_dir / "journal").glob("*.json"))]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then wait for the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start worker processes; any still running at teardown are killed, with their tasks."""
    started: list[WorkerProcess] = []
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("FENCELINE_")},
           "FENCELINE_ADMIN_PASSWORD": ADMIN_PASSWORD}

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


def python_task(task_id: str, program: str, *args: str, **fields: Any) -> dict[str, Any]:
    return {"task_id": task_id, "payload": {"command": [sys.executable, "-c", program, *args]}, "retry_delay": 0,
            **fields}


# Prints three lines naming its try and epoch, then waits for the gate file to exist (or 60 s).
GATED = """
import os, sys, time, pathlib
tag = f"try={os.environ['FENCELINE_TRY_NUMBER']} epoch={os.environ['FENCELINE_ATTEMPT_EPOCH']}"
for n in range(1, 4):
    print(f"{tag} line {n}", flush=True)
gate, deadline = pathlib.Path(sys.argv[1]), time.monotonic() + 60
while not gate.exists() and time.monotonic() < deadline:
    time.sleep(0.02)
print(f"{tag} done", flush=True)
"""
