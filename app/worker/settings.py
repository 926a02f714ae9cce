"""The worker's settings: command-line flags, each defaulting to a FENCELINE_* variable."""

import argparse
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class WorkerSettings:
    server: str
    seat: str
    swarm: str
    concurrency: int
    state_dir: Path
    heartbeat_interval: float
    poll_interval: float
    grace_period: float
    username: str
    password: str = field(repr=False)
    launcher_token: str = field(default="", repr=False)  # admits without the operator password
    log_format: str = "plain"


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


def add_arguments(parser: argparse.ArgumentParser) -> None:
    host = socket.gethostname().split(".")[0] or "local"
    parser.add_argument("--server", default=_env("FENCELINE_SERVER", "http://127.0.0.1:8000"),
                        help="the fenceline server (env FENCELINE_SERVER)")
    parser.add_argument("--seat", default=_env("FENCELINE_WORKER_SEAT", f"worker-{host}"),
                        help="the seat this worker fills (env FENCELINE_WORKER_SEAT)")
    parser.add_argument("--swarm", default=_env("FENCELINE_WORKER_SWARM", "default"),
                        help="the seat's swarm (env FENCELINE_WORKER_SWARM)")
    parser.add_argument("--concurrency", type=int, default=int(_env("FENCELINE_WORKER_CONCURRENCY", "2")),
                        help="tasks run at once (env FENCELINE_WORKER_CONCURRENCY)")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="where the worker keeps its execution, attempts and outcome journal "
                             "(env FENCELINE_WORKER_STATE_DIR; default ./data/worker/<seat>)")
    parser.add_argument("--heartbeat-interval", type=float,
                        default=float(_env("FENCELINE_WORKER_HEARTBEAT_INTERVAL", "10")),
                        help="seconds between heartbeats of a running task; keep it well under the "
                             "server's agent_lost_after_seconds (env FENCELINE_WORKER_HEARTBEAT_INTERVAL)")
    parser.add_argument("--poll-interval", type=float, default=float(_env("FENCELINE_WORKER_POLL_INTERVAL", "1")),
                        help="seconds between claims while idle (env FENCELINE_WORKER_POLL_INTERVAL)")
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
    for name in ("heartbeat_interval", "poll_interval"):
        if getattr(args, name) <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be positive")
    state_dir = args.state_dir or Path(_env("FENCELINE_WORKER_STATE_DIR", str(Path("data") / "worker" / args.seat)))
    return WorkerSettings(
        server=args.server, seat=args.seat, swarm=args.swarm, concurrency=args.concurrency,
        state_dir=state_dir, heartbeat_interval=args.heartbeat_interval, poll_interval=args.poll_interval,
        grace_period=max(0.0, args.grace_period), username=args.username, password=password,
        launcher_token=launcher_token, log_format=args.log_format,
    )
