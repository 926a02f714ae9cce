"""The launcher's settings: command-line flags, each defaulting to a FENCELINE_LAUNCHER_*
variable (the server, the log format and the credentials as the worker reads them), read once and
parsed as the worker's are (app/worker/settings.py): a value that does not parse is one line
naming its flag or variable, and exit status 2."""

import argparse
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from app.worker.settings import (
    SETTINGS,
    Setting,
    WorkerSettings,
    as_count,
    as_positive_seconds,
    as_queues,
    as_text,
    credentials,
    read,
)
from app.worker.settings import (
    add_arguments as add_settings,
)

DEFAULT_QUEUE = "kubernetes"


@dataclass(frozen=True, kw_only=True)
class LauncherSettings(WorkerSettings):
    namespace: str | None = None  # where the Pods go; None: the kubeconfig's, or the launcher Pod's own
    kubeconfig: str | None = None  # None: in-cluster, else KUBECONFIG or ~/.kube/config
    kube_context: str | None = None
    poll_interval: float = 2.0  # seconds between listings of the launcher's Pods
    start_deadline: float = 300.0  # a Pod whose container has not started by then is dispatch_failed
    service_account: str | None = None  # the task Pods' service account (its token is never mounted)
    # At most this long a replacement Pod waits for the Pods of the earlier attempts to stop.
    replacement_wait: float = 60.0
    metrics_port: int | None = None  # /metrics of the launcher's own metrics; None: not served


def as_port(raw: str) -> int:
    if not 1 <= (value := as_count(raw)) <= 65535:
        raise ValueError(f"must be a TCP port, 1 to 65535, not {value}")
    return value


_SHARED = {s.flag: s for s in SETTINGS}
LAUNCHER_SETTINGS = [
    _SHARED["--server"],
    Setting("--seat", "FENCELINE_LAUNCHER_SEAT", None, as_text,
            "the seat this launcher fills, one per launcher; its Pods carry it in the label fenceline.io/launcher "
            "(default launcher-<hostname>)"),
    Setting("--swarm", "FENCELINE_LAUNCHER_SWARM", "default", as_text, "the seat's swarm"),
    Setting("--queues", "FENCELINE_LAUNCHER_QUEUES", DEFAULT_QUEUE, as_queues,
            "comma-separated queues whose tasks it claims"),
    Setting("--concurrency", "FENCELINE_LAUNCHER_CONCURRENCY", "20", as_count, "Pods in flight at once"),
    Setting("--state-dir", "FENCELINE_LAUNCHER_STATE_DIR", None, Path,
            "its execution, attempts, journal and log spools; keep it across restarts to adopt running Pods "
            "(default ./data/launcher/<seat>)"),
    Setting("--namespace", "FENCELINE_LAUNCHER_NAMESPACE", None, as_text,
            "the namespace of the task Pods (default the kubeconfig context's, or in a Pod its own)"),
    Setting("--kubeconfig", "FENCELINE_LAUNCHER_KUBECONFIG", None, as_text,
            "a kubeconfig file (default: in-cluster when run in a Pod, else KUBECONFIG or ~/.kube/config)"),
    Setting("--context", None, None, as_text, "the kubeconfig context to use"),
    Setting("--poll-interval", "FENCELINE_LAUNCHER_POLL_INTERVAL", "2", as_positive_seconds,
            "seconds between listings of its Pods"),
    Setting("--start-deadline", "FENCELINE_LAUNCHER_START_DEADLINE", "300", as_positive_seconds,
            "seconds a Pod may take to start its container (scheduling, image pull) before it is dispatch_failed; "
            "keep it under the server's dispatch_lost_after_seconds"),
    Setting("--service-account", "FENCELINE_LAUNCHER_POD_SERVICE_ACCOUNT", None, as_text,
            "the task Pods' service account; its token is not mounted"),
    Setting("--replacement-wait", "FENCELINE_LAUNCHER_REPLACEMENT_WAIT", "60", as_positive_seconds,
            "seconds at most that the Pod of a re-placed attempt waits, before it is created, for the Pods of the "
            "task instance's earlier attempts (deleted first, whichever launcher made them) to be gone or terminal; "
            "past it, it is created anyway and the overlap is measured (docs/launcher.md)"),
    Setting("--metrics-port", "FENCELINE_LAUNCHER_METRICS_PORT", None, as_port,
            "serve the launcher's own metrics (fenceline_attempt_overlap_seconds) at /metrics on this port "
            "(default: not served)"),
    Setting("--heartbeat-interval", "FENCELINE_LAUNCHER_HEARTBEAT_INTERVAL", "10", as_positive_seconds,
            "seconds between heartbeats of a live Pod's attempt"),
    Setting("--claim-wait", "FENCELINE_LAUNCHER_CLAIM_WAIT", "20", as_positive_seconds,
            "seconds one claim waits for work, at most the server's limit on a claim's wait (docs/worker.md)"),
    _SHARED["--log-format"],
    _SHARED["--username"],
    _SHARED["--password-file"],
    _SHARED["--token-file"],
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_settings(parser, LAUNCHER_SETTINGS)
    add_pod_spec(parser)


def add_pod_spec(parser: argparse.ArgumentParser) -> None:
    """`pod-spec` takes the launcher's own settings of the Pod, from the same variables, so that
    run where the launcher runs it prints the Pod the launcher creates."""
    sub = parser.add_subparsers(dest="launcher_command")
    spec = sub.add_parser("pod-spec", help="print the Pod a WorkItem would get, as YAML, without a cluster")
    spec.add_argument("file", help="a WorkItem as POST /v1/dispatch/claim returns it (JSON), or - for standard input")
    spec.add_argument("--namespace", default=None,
                      help="the Pod's namespace (default: FENCELINE_LAUNCHER_NAMESPACE, else default)")
    spec.add_argument("--seat", default=None,
                      help="the launcher seat its label names (default: FENCELINE_LAUNCHER_SEAT, else the launcher's)")
    spec.add_argument("--service-account", default=None,
                      help="the Pod's service account (default: FENCELINE_LAUNCHER_POD_SERVICE_ACCOUNT)")


def pod_spec_settings(args: argparse.Namespace) -> dict[str, str | None]:
    """`pod-spec`'s namespace, seat and service account, defaulted as the launcher's are."""
    return {"namespace": args.namespace or os.environ.get("FENCELINE_LAUNCHER_NAMESPACE") or "default",
            "launcher": args.seat or os.environ.get("FENCELINE_LAUNCHER_SEAT") or default_seat(),
            "service_account": args.service_account or os.environ.get("FENCELINE_LAUNCHER_POD_SERVICE_ACCOUNT")}


def default_seat() -> str:
    return f"launcher-{socket.gethostname().split('.')[0] or 'local'}"


def from_args(args: argparse.Namespace) -> LauncherSettings:
    """The settings; ValueError saying, in one line, what is missing or wrong."""
    values = {setting.dest: read(args, setting) for setting in LAUNCHER_SETTINGS}
    password, launcher_token = credentials(values, "the launcher")
    seat = values["seat"] or default_seat()
    return LauncherSettings(
        server=values["server"], seat=seat, swarm=values["swarm"], concurrency=values["concurrency"],
        state_dir=values["state_dir"] or Path("data") / "launcher" / seat,
        heartbeat_interval=values["heartbeat_interval"], claim_wait=values["claim_wait"],
        # A stopping launcher leaves its Pods running (the next start adopts them): its
        # attempts only need the time to notice.
        grace_period=5.0, username=values["username"], password=password, launcher_token=launcher_token,
        queues=values["queues"], log_format=values["log_format"], namespace=values["namespace"],
        kubeconfig=values["kubeconfig"], kube_context=values["context"], poll_interval=values["poll_interval"],
        start_deadline=values["start_deadline"], service_account=values["service_account"],
        replacement_wait=values["replacement_wait"], metrics_port=values["metrics_port"],
    )
