"""`fenceline demo` runs to completion on a fresh install, explains itself, and cleans up."""

import re
import subprocess
import sys
from pathlib import Path

from tests.support.agents import REPO


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if text.encode() in (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes():
                found.append(entry.name)
        except OSError:
            continue
    return found


class TestDemo:
    def test_the_demo_runs_and_says_what_happened(self):
        done = subprocess.run([sys.executable, "-m", "app.cli", "demo", "--timeout", "60"], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        out = done.stdout
        assert done.returncode == 0, out + done.stderr
        assert "run fenceline_demo / demo-run-1 finished: success" in out
        # Never silent while it waits: it says what it starts and what it stops.
        assert out.index("starting the server") < out.index("server up") < out.index("both workers admitted")
        assert out.index("stopping the workers") < out.index("stopping the server") < out.index("cleaned up")
        assert re.search(r"transform\[2\] is running on demo-worker-\d: killing that worker with SIGKILL", out)
        assert re.search(r"transform\[1\] +try 1 epoch \d+ on demo-worker-\d: failed \(application failure", out)
        assert re.search(r"try 2 epoch \d+ on demo-worker-\d: success", out)
        assert re.search(r"transform\[2\] +try 1 epoch 1 on demo-worker-\d: unexecutable: agent_lost", out)
        assert "try_number 1 (retries: 0) after 2 attempts, infra_attempts 1 of 3 used" in out
        assert re.search(r"Airflow-compatible URL: http://127\.0\.0\.1:\d+/api/v2/dags/fenceline_demo/dagRuns/"
                         r"demo-run-1/taskInstances/transform/logs/1\?map_index=2", out)
        assert "which reads (full_content=true):\n  | ::fenceline:: try 1 epoch 1 on execution" in out
        assert "re-placed: epoch 1 ended (infra: agent_lost)" in out
        assert "| step 10/10" in out
        root = re.search(r"cleaned up: server and workers stopped, (\S+) removed", out).group(1)
        assert not Path(root).exists()
        assert _processes_mentioning(root) == []

    def test_the_fencing_scenario_refuses_the_paused_attempts_late_write(self):
        done = subprocess.run([sys.executable, "-m", "app.cli", "demo", "--scenario", "fencing", "--timeout", "60"],
                              cwd=REPO, capture_output=True, text=True, timeout=120)
        out = done.stdout
        assert done.returncode == 0, out + done.stderr
        first = int(re.search(r"load_totals holds fencing token (\d+) on demo-worker-\d and is about to write: "
                              r"pausing the worker and its task with SIGSTOP", out).group(1))
        second = int(re.search(r"the reaper re-placed it: load_totals runs on demo-worker-\d with fencing token (\d+) "
                               r"\(agent_lost, same try\)", out).group(1))
        assert second > first
        assert f"token {second}: wrote total 45 for 2026-12-06" in out
        assert re.search(rf"token {first}: StaleToken: fencing token {first} for '[0-9a-f-]+' is stale: "
                         rf"the store has seen {second}", out)
        assert f"daily_totals  day 2026-12-06: total 45, written by fencing token {second}" in out
        assert "the superseded attempt's late write was refused; the replacement's row stands" in out
        root = re.search(r"cleaned up: server and workers stopped, (\S+) removed", out).group(1)
        assert not Path(root).exists() and _processes_mentioning(root) == []
