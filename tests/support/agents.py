"""`fenceline worker` and `fenceline launcher` as child processes, and the tasks they run.

The agents talk HTTP only, so their tests run on SQLite alone: every server-side rule they
touch is tested on both databases elsewhere."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
SQLITE_ONLY = "worker processes talk HTTP only; covered on SQLite"


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


class LauncherProcess(WorkerProcess):
    """`fenceline launcher` as a child process (the worker's: its output, kill and stop)."""

    def __init__(self, server_url: str, kubeconfig: Path, seat: str, state_dir: Path, env: dict[str, str],
                 *flags: str) -> None:
        self.seat, self.state_dir = seat, state_dir
        self.log_path = state_dir.with_name(f"{state_dir.name}-{time.monotonic_ns()}.log")
        args = ["--server", server_url, "--seat", seat, "--state-dir", str(state_dir), "--kubeconfig", str(kubeconfig),
                "--heartbeat-interval", "0.2", "--poll-interval", "0.1",
                # A short claim wait: the server holds a waiting claim of a killed launcher to its end.
                "--claim-wait", "1", *flags]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "app.cli", "launcher", *args], cwd=REPO, env=env,
                                         stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def settled(operator: Any, task_id: str = "t", timeout: float = 30) -> dict[str, Any]:
    """The task instance once it is finished (success, failed, infra_failed)."""
    return wait_until(lambda: (t := operator.find_ti(task_id))["state"] in ("success", "failed", "infra_failed")
                      and t, f"{task_id} to finish", timeout)


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
