"""The launcher's settings: command-line flags, each defaulting to a FENCELINE_LAUNCHER_*
variable (the server and the credentials are read as the worker reads them)."""

import argparse
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from app.worker.settings import MAX_CLAIM_WAIT, WorkerSettings

DEFAULT_QUEUE = "kubernetes"


@dataclass(frozen=True, kw_only=True)
class LauncherSettings(WorkerSettings):
    namespace: str | None = None  # where the Pods go; None: the kubeconfig's, or the launcher Pod's own
    kubeconfig: str | None = None  # None: in-cluster, else KUBECONFIG or ~/.kube/config
    kube_context: str | None = None
    poll_interval: float = 2.0  # seconds between listings of the launcher's Pods
    start_deadline: float = 300.0  # a Pod whose container has not started by then is dispatch_failed
    service_account: str | None = None  # the task Pods' service account (its token is never mounted)


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", default=_env("FENCELINE_SERVER", "http://127.0.0.1:8000"),
                        help="the fenceline server (env FENCELINE_SERVER)")
    parser.add_argument("--seat", default=os.environ.get("FENCELINE_LAUNCHER_SEAT") or None,
                        help="the seat this launcher fills, one per launcher; its Pods carry it in the label "
                             "fenceline.io/launcher (env FENCELINE_LAUNCHER_SEAT; default launcher-<hostname>)")
    parser.add_argument("--swarm", default=_env("FENCELINE_LAUNCHER_SWARM", "default"),
                        help="the seat's swarm (env FENCELINE_LAUNCHER_SWARM)")
    parser.add_argument("--queues", default=_env("FENCELINE_LAUNCHER_QUEUES", DEFAULT_QUEUE),
                        help="comma-separated queues whose tasks it claims (env FENCELINE_LAUNCHER_QUEUES)")
    parser.add_argument("--concurrency", type=int, default=int(_env("FENCELINE_LAUNCHER_CONCURRENCY", "20")),
                        help="Pods in flight at once (env FENCELINE_LAUNCHER_CONCURRENCY)")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="its execution, attempts, journal and log spools; keep it across restarts to adopt "
                             "running Pods (env FENCELINE_LAUNCHER_STATE_DIR; default ./data/launcher/<seat>)")
    parser.add_argument("--namespace", default=os.environ.get("FENCELINE_LAUNCHER_NAMESPACE") or None,
                        help="the namespace of the task Pods (env FENCELINE_LAUNCHER_NAMESPACE; default the "
                             "kubeconfig context's, or in a Pod its own)")
    parser.add_argument("--kubeconfig", default=os.environ.get("FENCELINE_LAUNCHER_KUBECONFIG") or None,
                        help="a kubeconfig file (env FENCELINE_LAUNCHER_KUBECONFIG; default: in-cluster when run in "
                             "a Pod, else KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--context", dest="kube_context", default=None, help="the kubeconfig context to use")
    parser.add_argument("--poll-interval", type=float,
                        default=float(_env("FENCELINE_LAUNCHER_POLL_INTERVAL", "2")),
                        help="seconds between listings of its Pods (env FENCELINE_LAUNCHER_POLL_INTERVAL)")
    parser.add_argument("--start-deadline", type=float,
                        default=float(_env("FENCELINE_LAUNCHER_START_DEADLINE", "300")),
                        help="seconds a Pod may take to start its container (scheduling, image pull) before "
                             "it is dispatch_failed; keep it under the server's dispatch_lost_after_seconds "
                             "(env FENCELINE_LAUNCHER_START_DEADLINE)")
    parser.add_argument("--service-account", default=os.environ.get("FENCELINE_LAUNCHER_POD_SERVICE_ACCOUNT") or None,
                        help="the task Pods' service account; its token is not mounted "
                             "(env FENCELINE_LAUNCHER_POD_SERVICE_ACCOUNT)")
    parser.add_argument("--heartbeat-interval", type=float,
                        default=float(_env("FENCELINE_LAUNCHER_HEARTBEAT_INTERVAL", "10")),
                        help="seconds between heartbeats of a live Pod's attempt "
                             "(env FENCELINE_LAUNCHER_HEARTBEAT_INTERVAL)")
    parser.add_argument("--claim-wait", type=float, default=float(_env("FENCELINE_LAUNCHER_CLAIM_WAIT", "20")),
                        help=f"seconds one claim waits for work, at most {MAX_CLAIM_WAIT} "
                             "(env FENCELINE_LAUNCHER_CLAIM_WAIT)")
    parser.add_argument("--log-format", choices=["plain", "json"], default=_env("FENCELINE_LOG_FORMAT", "plain"),
                        help="plain text lines, or one JSON object per line (env FENCELINE_LOG_FORMAT)")
    parser.add_argument("--username", default=_env("FENCELINE_ADMIN_USERNAME", "admin"),
                        help="operator username, to admit the launcher (env FENCELINE_ADMIN_USERNAME)")
    parser.add_argument("--password-file", type=Path, default=None,
                        help="file holding the operator password (else env FENCELINE_ADMIN_PASSWORD)")
    parser.add_argument("--token-file", type=Path, default=None,
                        help="file holding a launcher token (POST /v1/auth/launcher-tokens), used instead of the "
                             "operator password (else env FENCELINE_LAUNCHER_TOKEN)")
    add_pod_spec(parser)


def add_pod_spec(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="launcher_command")
    spec = sub.add_parser("pod-spec", help="print the Pod a WorkItem would get, as YAML, without a cluster")
    spec.add_argument("file", help="a WorkItem as POST /v1/dispatch/claim returns it (JSON), or - for standard input")
    spec.add_argument("--namespace", default=None, help="the Pod's namespace (default: default)")
    spec.add_argument("--seat", default=None, help="the launcher seat its label names (default: launcher)")
    spec.add_argument("--service-account", default=None, help="the Pod's service account")


def _positive(value: float, flag: str) -> float:
    if not value > 0:
        raise ValueError(f"{flag} must be positive, not {value:g}")
    return value


def from_args(args: argparse.Namespace) -> LauncherSettings:
    """The settings; ValueError saying, in one line, what is missing or wrong."""
    launcher_token = (args.token_file.read_text().strip() if args.token_file is not None
                      else os.environ.get("FENCELINE_LAUNCHER_TOKEN", ""))
    password = (args.password_file.read_text().strip() if args.password_file is not None
                else os.environ.get("FENCELINE_ADMIN_PASSWORD", ""))
    if not password and not launcher_token:
        raise ValueError("a credential is needed to admit the launcher: a launcher token (FENCELINE_LAUNCHER_TOKEN "
                         "or --token-file) or the operator password (FENCELINE_ADMIN_PASSWORD or --password-file)")
    if args.concurrency < 1:
        raise ValueError(f"--concurrency must be at least 1, not {args.concurrency}")
    queues = tuple(dict.fromkeys(q.strip() for q in args.queues.split(",") if q.strip()))
    if not queues:
        raise ValueError("--queues must name at least one queue")
    if not 0 < args.claim_wait <= MAX_CLAIM_WAIT:
        raise ValueError(f"--claim-wait must be above 0 and at most {MAX_CLAIM_WAIT}, not {args.claim_wait:g}")
    seat = args.seat or f"launcher-{socket.gethostname().split('.')[0] or 'local'}"
    state_dir = args.state_dir or Path(_env("FENCELINE_LAUNCHER_STATE_DIR", str(Path("data") / "launcher" / seat)))
    return LauncherSettings(
        server=args.server, seat=seat, swarm=args.swarm, concurrency=args.concurrency, state_dir=state_dir,
        heartbeat_interval=_positive(args.heartbeat_interval, "--heartbeat-interval"), claim_wait=args.claim_wait,
        # A stopping launcher leaves its Pods running (the next start adopts them): its
        # attempts only need the time to notice.
        grace_period=5.0, username=args.username, password=password, launcher_token=launcher_token,
        queues=queues, log_format=args.log_format, namespace=args.namespace, kubeconfig=args.kubeconfig,
        kube_context=args.kube_context, poll_interval=_positive(args.poll_interval, "--poll-interval"),
        start_deadline=_positive(args.start_deadline, "--start-deadline"), service_account=args.service_account,
    )
