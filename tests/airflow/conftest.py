"""What the Airflow-compatibility tests share: the 2.10 client's virtual environment, and the
calls it makes against a live server."""

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import ADMIN_PASSWORD

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-airflow2"
REQUIREMENTS = Path(__file__).with_name("requirements-2.10.txt")


@pytest.fixture(scope="session")
def airflow2_python() -> Path:
    """The second virtual environment's Python, with the 2.10 client (made once if missing,
    by one of the suite's parallel workers while the others wait; .ci/run makes it up front)."""
    python = VENV / "bin" / "python"
    with open(ROOT / ".venv-airflow2.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)], check=True)
    return python


def run_in_airflow2(python: Path, script: str, *args: str, stdin: str | None = None) -> Any:
    """Run tests/airflow/`script` with the 2.10 client; answers the JSON it printed."""
    proc = subprocess.run([str(python), str(Path(__file__).with_name(script)), *args], input=stdin,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ""})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def v1_calls(live_server, airflow2_python) -> Callable[[list], list]:
    """Calls of the 2.10 client against the live server, as the operator (tests/airflow/v1_calls.py)."""

    def call(calls: list) -> list:
        return run_in_airflow2(airflow2_python, "v1_calls.py", live_server.url, "admin", ADMIN_PASSWORD,
                               stdin=json.dumps(calls))

    return call
