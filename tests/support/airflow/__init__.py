"""What the Airflow-compatibility tests share: the 2.10 client's virtual environment and the
scripts it runs (v1_calls, v1_client, v1_surface), and the runs they read (scenario, mixed)."""

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
VENV = ROOT / ".venv-airflow2"
REQUIREMENTS = HERE / "requirements-2.10.txt"


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
    """Run this package's `script` with the 2.10 client; answers the JSON it printed."""
    proc = subprocess.run([str(python), str(HERE / script), *args], input=stdin,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ""})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
