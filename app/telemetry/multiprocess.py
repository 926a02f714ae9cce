"""prometheus-client's multiprocess mode for a server of several processes: set up before any
process imports prometheus_client (so this module imports only the standard library)."""

import os
import shutil
import tempfile
from pathlib import Path

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def prepare_multiprocess(n_workers: int) -> Path | None:
    """Set up prometheus-client's multiprocess mode (app/telemetry/metrics.py) for a server of
    `n_workers` processes. Call it before anything imports app.telemetry.metrics (or prometheus_client):
    the values are files from the first metric on, and worker processes inherit the
    environment. With PROMETHEUS_MULTIPROC_DIR already set (an operator's emptyDir, one per
    server) it is used as it is; else one process needs nothing, and several get a fresh
    directory of their own. Answers the directory, if any."""
    if directory := os.environ.get(MULTIPROC_ENV):
        Path(directory).mkdir(parents=True, exist_ok=True)
        return Path(directory)
    if n_workers <= 1:
        return None
    directory = tempfile.mkdtemp(prefix="fenceline-metrics-")
    os.environ[MULTIPROC_ENV] = directory
    return Path(directory)


def remove_multiprocess_dir(directory: Path | None) -> None:
    """Remove the directory prepare_multiprocess made (the server is done); an operator's stays."""
    if directory is not None and directory.name.startswith("fenceline-metrics-"):
        shutil.rmtree(directory, ignore_errors=True)
