"""`fenceline launcher` as a real process, against a real server on a loopback port and an
emulated Kubernetes API (tests/launcher/cluster.py) that it reaches through a kubeconfig,
with the official client, as it would a cluster.

Like the worker's, the launcher talks HTTP only, so these tests run on SQLite alone: every
server-side rule they touch (the report fence, re-places, the log) is tested on both
databases elsewhere.
"""

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.launcher.cluster import IMAGE, Kubelet, RunningCluster
from tests.support.agents import WorkerProcess
from tests.support.api import ADMIN_PASSWORD
from tests.support.servers import LiveServer
from tests.support.waiting import wait_until
from tests.worker.conftest import serve  # noqa: F401 (a fixture)

REPO = Path(__file__).resolve().parents[2]
QUEUE = "kubernetes"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RunningCluster]:
    with RunningCluster(tmp_path) as running:
        yield running


@pytest.fixture
def kubelet(cluster: RunningCluster) -> Iterator[Kubelet]:
    with Kubelet(cluster) as running:
        yield running


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


@pytest.fixture
def launchers(tmp_path: Path, cluster: RunningCluster) -> Iterator[Callable[..., LauncherProcess]]:
    started: list[LauncherProcess] = []
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("FENCELINE_", "KUBECONFIG"))},
           "FENCELINE_ADMIN_PASSWORD": ADMIN_PASSWORD}

    def start(server: LiveServer, *flags: str, seat: str = "launcher-1", kubeconfig: Path | None = None,
              state: str | None = None) -> LauncherProcess:
        launcher = LauncherProcess(server.url, kubeconfig or cluster.kubeconfig, seat, tmp_path / (state or seat),
                                   env, *flags)
        started.append(launcher)
        return launcher

    yield start
    for launcher in started:
        if launcher.proc.poll() is None:
            launcher.kill()


def image_task(task_id: str, *script: str, **fields: Any) -> dict[str, Any]:
    """A task of the kubernetes queue whose Pod runs `script` in the test kubelet."""
    return {"task_id": task_id, "payload": {"image": IMAGE, "args": list(script)}, "queue": QUEUE,
            "retry_delay": 0, **fields}


def settled(operator: Any, task_id: str = "t", timeout: float = 30) -> dict[str, Any]:
    """The task instance once it is finished (success, failed, infra_failed)."""
    return wait_until(lambda: (t := operator.find_ti(task_id))["state"] in ("success", "failed", "infra_failed")
                      and t, f"{task_id} to finish", timeout)
