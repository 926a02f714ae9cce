"""`fenceline worker` as a child process, and the tasks it runs."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


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
