"""`fenceline launcher` as a real process, against a real server on a loopback port and an
emulated Kubernetes API (tests/support/kubernetes.py) that it reaches through a kubeconfig,
with the official client, as it would a cluster.

Like the worker's, the launcher talks HTTP only, so these tests run on SQLite alone: every
server-side rule they touch (the report fence, re-places, the log) is tested on both
databases elsewhere.
"""

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import SQLITE_ONLY, LauncherProcess
from tests.support.api import ADMIN_PASSWORD
from tests.support.kubernetes import Kubelet, RunningCluster
from tests.support.servers import LiveServer, live_servers


@pytest.fixture
def serve(db_url: str, engine: Any) -> Iterator[Callable[..., LiveServer]]:
    """Start a live server of the test's own, with setting overrides; stopped at teardown.
    SQLite only: see the module docstring."""
    if not db_url.startswith("sqlite"):
        pytest.skip(SQLITE_ONLY)
    with live_servers(db_url) as start:
        yield start


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RunningCluster]:
    with RunningCluster(tmp_path) as running:
        yield running


@pytest.fixture
def kubelet(cluster: RunningCluster) -> Iterator[Kubelet]:
    with Kubelet(cluster) as running:
        yield running


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
