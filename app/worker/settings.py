"""The worker's settings: command-line flags, each defaulting to a FENCELINE_* variable."""

import argparse
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

MAX_CLAIM_WAIT = 30  # the server's limit on a claim's wait_seconds


@dataclass(frozen=True)
class WorkerSettings:
    server: str
    seat: str
    swarm: str
    concurrency: int
    state_dir: Path
    heartbeat_interval: float
    claim_wait: float
    grace_period: float
    username: str
    password: str = field(repr=False)
    launcher_token: str = field(default="", repr=False)  # admits without the operator password
    queues: tuple[str, ...] = ("default",)  # the queues its claims serve
    runtime: str = "local"
    # The Pod this worker runs in (runtime kubernetes): pod_namespace, pod_name, pod_uid.
    pod: dict[str, str] | None = None
    log_format: str = "plain"
    batch_tick: float = 0.05  # seconds agent writes wait to go together in one batch (0: single requests)


RUNTIMES = ("local", "kubernetes")
# The downward API's fields, as the Pod spec hands them to the worker (deploy/kubernetes/).
POD_ENV = {"pod_namespace": "FENCELINE_POD_NAMESPACE", "pod_name": "FENCELINE_POD_NAME",
           "pod_uid": "FENCELINE_POD_UID"}


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", default=_env("FENCELINE_SERVER", "http://127.0.0.1:8000"),
                        help="the fenceline server (env FENCELINE_SERVER)")
    parser.add_argument("--seat", default=os.environ.get("FENCELINE_WORKER_SEAT") or None,
                        help="the seat this worker fills (env FENCELINE_WORKER_SEAT; default worker-<hostname>, "
                             "or the Pod's name under --runtime kubernetes)")
    parser.add_argument("--runtime", choices=RUNTIMES, default=_env("FENCELINE_WORKER_RUNTIME", "local"),
                        help="local: a process on a host; kubernetes: a Pod of a StatefulSet, the Pod being the "
                             "seat, identified by FENCELINE_POD_NAMESPACE, FENCELINE_POD_NAME and FENCELINE_POD_UID "
                             "(the downward API) (env FENCELINE_WORKER_RUNTIME)")
    parser.add_argument("--swarm", default=_env("FENCELINE_WORKER_SWARM", "default"),
                        help="the seat's swarm (env FENCELINE_WORKER_SWARM)")
    parser.add_argument("--queues", default=_env("FENCELINE_WORKER_QUEUES", "default"),
                        help="comma-separated queues whose tasks this worker claims, e.g. gpu,default "
                             "(env FENCELINE_WORKER_QUEUES)")
    parser.add_argument("--concurrency", type=int, default=int(_env("FENCELINE_WORKER_CONCURRENCY", "2")),
                        help="tasks run at once (env FENCELINE_WORKER_CONCURRENCY)")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="where the worker keeps its execution, attempts and outcome journal "
                             "(env FENCELINE_WORKER_STATE_DIR; default ./data/worker/<seat>)")
    parser.add_argument("--heartbeat-interval", type=float,
                        default=float(_env("FENCELINE_WORKER_HEARTBEAT_INTERVAL", "10")),
                        help="seconds between heartbeats of a running task; keep it well under the "
                             "server's agent_lost_after_seconds (env FENCELINE_WORKER_HEARTBEAT_INTERVAL)")
    parser.add_argument("--claim-wait", type=float, default=float(_env("FENCELINE_WORKER_CLAIM_WAIT", "20")),
                        help="seconds one claim waits on the server for work while idle, at most "
                             f"{MAX_CLAIM_WAIT}: the server answers as soon as work is ready "
                             "(env FENCELINE_WORKER_CLAIM_WAIT)")
    parser.add_argument("--batch-tick", type=float, default=float(_env("FENCELINE_WORKER_BATCH_TICK", "0.05")),
                        help="seconds the running tasks' heartbeats and log chunks wait to go to the server together "
                             "in one batch (reports go at once); 0 sends each on its own "
                             "(env FENCELINE_WORKER_BATCH_TICK)")
    parser.add_argument("--grace-period", type=float, default=float(_env("FENCELINE_WORKER_GRACE_PERIOD", "30")),
                        help="on SIGTERM, seconds running tasks get to finish (env FENCELINE_WORKER_GRACE_PERIOD)")
    parser.add_argument("--log-format", choices=["plain", "json"], default=_env("FENCELINE_LOG_FORMAT", "plain"),
                        help="plain text lines, or one JSON object per line (env FENCELINE_LOG_FORMAT)")
    parser.add_argument("--username", default=_env("FENCELINE_ADMIN_USERNAME", "admin"),
                        help="operator username, to admit this worker (env FENCELINE_ADMIN_USERNAME)")
    parser.add_argument("--password-file", type=Path, default=None,
                        help="file holding the operator password (else env FENCELINE_ADMIN_PASSWORD)")
    parser.add_argument("--token-file", type=Path, default=None,
                        help="file holding a launcher token from POST /v1/auth/launcher-tokens, used instead of "
                             "the operator password: it can only admit and update executions "
                             "(else env FENCELINE_LAUNCHER_TOKEN)")


def from_args(args: argparse.Namespace) -> WorkerSettings:
    """The settings; ValueError naming what is missing or wrong."""
    if args.token_file is not None:
        launcher_token = args.token_file.read_text().strip()
    else:
        launcher_token = os.environ.get("FENCELINE_LAUNCHER_TOKEN", "")
    if args.password_file is not None:
        password = args.password_file.read_text().strip()
    else:
        password = os.environ.get("FENCELINE_ADMIN_PASSWORD", "")
    if not password and not launcher_token:
        raise ValueError("a credential is needed to admit the worker: a launcher token (FENCELINE_LAUNCHER_TOKEN "
                         "or --token-file) or the operator password (FENCELINE_ADMIN_PASSWORD or --password-file)")
    if args.concurrency < 1:
        raise ValueError("--concurrency must be at least 1")
    queues = tuple(dict.fromkeys(q.strip() for q in args.queues.split(",") if q.strip()))
    if not queues:
        raise ValueError("--queues must name at least one queue")
    if args.heartbeat_interval <= 0:
        raise ValueError("--heartbeat-interval must be positive")
    if not 0 < args.claim_wait <= MAX_CLAIM_WAIT:
        raise ValueError(f"--claim-wait must be above 0 and at most {MAX_CLAIM_WAIT}")
    if not 0 <= args.batch_tick <= 5:
        raise ValueError("--batch-tick must be between 0 and 5 seconds")
    seat, pod = _identity(args)
    state_dir = args.state_dir or Path(_env("FENCELINE_WORKER_STATE_DIR", str(Path("data") / "worker" / seat)))
    return WorkerSettings(
        server=args.server, seat=seat, swarm=args.swarm, runtime=args.runtime, pod=pod, concurrency=args.concurrency,
        state_dir=state_dir, heartbeat_interval=args.heartbeat_interval, claim_wait=args.claim_wait,
        grace_period=max(0.0, args.grace_period), username=args.username, password=password,
        launcher_token=launcher_token, queues=queues, log_format=args.log_format, batch_tick=args.batch_tick,
    )


def _identity(args: argparse.Namespace) -> tuple[str, dict[str, str] | None]:
    """The seat, and the Pod under the kubernetes runtime, whose name is the seat."""
    if args.runtime == "local":
        host = socket.gethostname().split(".")[0] or "local"
        return args.seat or f"worker-{host}", None
    pod = {field: os.environ.get(name, "").strip() for field, name in POD_ENV.items()}
    if missing := [POD_ENV[field] for field, value in pod.items() if not value]:
        raise ValueError(f"--runtime kubernetes needs {', '.join(missing)} from the downward API "
                         "(metadata.namespace, metadata.name, metadata.uid): see deploy/kubernetes/worker.yaml")
    if args.seat and args.seat != pod["pod_name"]:
        raise ValueError(f"under --runtime kubernetes the seat is the Pod's name ({pod['pod_name']!r}), "
                         f"not {args.seat!r}")
    return pod["pod_name"], pod
