"""The worker's settings: command-line flags, each defaulting to a FENCELINE_* variable.

Read once, by from_args: each value comes from its flag, else its variable (an empty one counts
as unset), else its default, and is parsed there; a value that does not parse is a ValueError
naming the flag or the variable it came from (`fenceline worker` prints it on one line and
exits 2, as `fenceline serve` does with its settings).

The longest a claim may wait is the server's rule (MAX_CLAIM_WAIT_SECONDS, in the server's
claim schema): the worker, which imports nothing of the server, checks only that --claim-wait
is positive, and a longer one is refused by the server on the worker's first claim, which the
worker reports as a bad setting (app/worker/agent.py).
"""

import argparse
import math
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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
LOG_FORMATS = ("plain", "json")
# The downward API's fields, as the Pod spec hands them to the worker (deploy/kubernetes/).
POD_ENV = {"pod_namespace": "FENCELINE_POD_NAMESPACE", "pod_name": "FENCELINE_POD_NAME",
           "pod_uid": "FENCELINE_POD_UID"}


# Parsers: a flag's or a variable's text to its value, ValueError saying what is wrong with it.

def as_text(raw: str) -> str:
    return raw


def as_server_url(raw: str) -> str:
    """The server's base URL, as the HTTP client reads it: http(s) with a host. Any other is a
    mistake no retry can fix (only a server that does not answer is waited for)."""
    import httpx  # here: every `fenceline` command reads these settings' flags, few use the client

    try:
        url = httpx.URL(raw.strip())
    except httpx.InvalidURL as exc:
        raise ValueError(f"{raw!r} is not a URL ({exc})") from None
    if url.scheme not in ("http", "https") or not url.host or not 0 < (url.port or 80) < 65536:
        raise ValueError(f"{raw!r} is not the server's URL (http://host:port or https://host)")
    return raw.strip()


def _parsed(kind: Callable[[str], Any], what: str, raw: str) -> Any:
    try:
        return kind(raw.strip())
    except ValueError:
        raise ValueError(f"{raw!r} is not {what}") from None


def as_count(raw: str) -> int:
    if (value := _parsed(int, "a whole number", raw)) < 1:
        raise ValueError(f"must be at least 1, not {value}")
    return value


def as_seconds(raw: str) -> float:
    if not math.isfinite(value := _parsed(float, "a number of seconds", raw)):
        raise ValueError(f"{raw!r} is not a number of seconds")
    return value


def as_positive_seconds(raw: str) -> float:
    if not (value := as_seconds(raw)) > 0:
        raise ValueError(f"must be above 0, not {raw.strip()}")
    return value


def one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in choices:
            raise ValueError(f"{raw!r} is not one of {', '.join(choices)}")
        return raw
    return parse


def as_tick(raw: str) -> float:
    if not 0 <= (value := as_seconds(raw)) <= 5:
        raise ValueError(f"must be between 0 and 5 seconds, not {raw.strip()}")
    return value


def as_queues(raw: str) -> tuple[str, ...]:
    queues = tuple(dict.fromkeys(q.strip() for q in raw.split(",") if q.strip()))
    if not queues:
        raise ValueError("must name at least one queue")
    return queues


@dataclass(frozen=True)
class Setting:
    """One setting: its flag, its variable (None: flag only), its default and its parser."""

    flag: str
    env: str | None
    default: str | None
    parse: Callable[[str], Any]
    help: str
    meta: dict[str, Any] = field(default_factory=dict)  # more of add_argument's keywords

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


SETTINGS = [
    Setting("--server", "FENCELINE_SERVER", "http://127.0.0.1:8000", as_server_url, "the fenceline server"),
    Setting("--seat", "FENCELINE_WORKER_SEAT", None, as_text,
            "the seat this worker fills (default worker-<hostname>, or the Pod's name under --runtime kubernetes)"),
    Setting("--runtime", "FENCELINE_WORKER_RUNTIME", "local", one_of(RUNTIMES),
            "local: a process on a host; kubernetes: a Pod of a StatefulSet, the Pod being the seat, identified by "
            "FENCELINE_POD_NAMESPACE, FENCELINE_POD_NAME and FENCELINE_POD_UID (the downward API)",
            {"metavar": "{" + ",".join(RUNTIMES) + "}"}),
    Setting("--swarm", "FENCELINE_WORKER_SWARM", "default", as_text, "the seat's swarm"),
    Setting("--queues", "FENCELINE_WORKER_QUEUES", "default", as_queues,
            "comma-separated queues whose tasks this worker claims, e.g. gpu,default"),
    Setting("--concurrency", "FENCELINE_WORKER_CONCURRENCY", "2", as_count, "tasks run at once"),
    Setting("--state-dir", "FENCELINE_WORKER_STATE_DIR", None, Path,
            "where the worker keeps its execution, attempts and outcome journal (default ./data/worker/<seat>)"),
    Setting("--heartbeat-interval", "FENCELINE_WORKER_HEARTBEAT_INTERVAL", "10", as_positive_seconds,
            "seconds between heartbeats of a running task; keep it well under the server's agent_lost_after_seconds"),
    Setting("--claim-wait", "FENCELINE_WORKER_CLAIM_WAIT", "20", as_positive_seconds,
            "seconds one claim waits on the server for work while idle, at most the server's limit on a claim's "
            "wait (docs/worker.md): the server answers as soon as work is ready"),
    Setting("--batch-tick", "FENCELINE_WORKER_BATCH_TICK", "0.05", as_tick,
            "seconds the running tasks' heartbeats and log chunks wait to go to the server together in one batch "
            "(reports and log tails wait 5 ms), and slots freed one by one two ticks to be claimed together; 0 sends "
            "each write on its own"),
    Setting("--grace-period", "FENCELINE_WORKER_GRACE_PERIOD", "30", as_seconds,
            "on SIGTERM, seconds running tasks get to finish"),
    Setting("--log-format", "FENCELINE_LOG_FORMAT", "plain", one_of(LOG_FORMATS),
            "plain text lines, or one JSON object per line", {"metavar": "{" + ",".join(LOG_FORMATS) + "}"}),
    Setting("--username", "FENCELINE_ADMIN_USERNAME", "admin", as_text, "operator username, to admit this worker"),
    Setting("--password-file", None, None, Path,
            "file holding the operator password (else env FENCELINE_ADMIN_PASSWORD)"),
    Setting("--token-file", None, None, Path,
            "file holding a launcher token from POST /v1/auth/launcher-tokens, used instead of the operator password: "
            "it can only admit and update executions (else env FENCELINE_LAUNCHER_TOKEN)"),
]


def add_arguments(parser: argparse.ArgumentParser, settings: list[Setting] = SETTINGS) -> None:
    """The flags, as text: from_args parses them, and their variables, once."""
    for setting in settings:
        said = [*([f"env {setting.env}"] if setting.env else []),
                *([f"default {setting.default}"] if setting.default is not None else [])]
        where = f" ({'; '.join(said)})" if said else ""
        parser.add_argument(setting.flag, default=None, help=setting.help + where, **setting.meta)


def read(args: argparse.Namespace, setting: Setting) -> Any:
    """The setting's value: its flag's, else its variable's, else its default (None when it has
    none); ValueError naming where a value that does not parse came from."""
    raw, source = getattr(args, setting.dest), setting.flag
    if raw is None and setting.env is not None:
        raw, source = os.environ.get(setting.env) or None, setting.env
    if raw is None:
        raw = setting.default
    if raw is None:
        return None
    try:
        return setting.parse(raw)
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None


def from_args(args: argparse.Namespace) -> WorkerSettings:
    """The settings; ValueError naming what is missing or wrong."""
    values = {setting.dest: read(args, setting) for setting in SETTINGS}
    password, launcher_token = credentials(values, "the worker")
    seat, pod = _identity(values["runtime"], values["seat"])
    return WorkerSettings(
        server=values["server"], seat=seat, swarm=values["swarm"], runtime=values["runtime"], pod=pod,
        concurrency=values["concurrency"], state_dir=state_dir_from(args),
        heartbeat_interval=values["heartbeat_interval"],
        claim_wait=values["claim_wait"], grace_period=max(0.0, values["grace_period"]),
        username=values["username"], password=password, launcher_token=launcher_token, queues=values["queues"],
        log_format=values["log_format"], batch_tick=values["batch_tick"],
    )


def state_dir_from(args: argparse.Namespace) -> Path:
    """The state directory: --state-dir, else the seat's default (from_args's; read without the
    other settings for `fenceline worker alive`, which needs no credential); ValueError as
    from_args."""
    by_dest = {setting.dest: setting for setting in SETTINGS}
    if (state_dir := read(args, by_dest["state_dir"])) is not None:
        return state_dir
    seat, _ = _identity(read(args, by_dest["runtime"]), read(args, by_dest["seat"]))
    return Path("data") / "worker" / seat


def credentials(values: dict[str, Any], who: str) -> tuple[str, str]:
    """The operator password and the launcher token an agent admits itself with (at least one),
    from the --password-file and --token-file values, else the environment."""
    if values["token_file"] is not None:
        launcher_token = values["token_file"].read_text().strip()
    else:
        launcher_token = os.environ.get("FENCELINE_LAUNCHER_TOKEN", "")
    if values["password_file"] is not None:
        password = values["password_file"].read_text().strip()
    else:
        password = os.environ.get("FENCELINE_ADMIN_PASSWORD", "")
    if not password and not launcher_token:
        raise ValueError(f"a credential is needed to admit {who}: a launcher token (FENCELINE_LAUNCHER_TOKEN "
                         "or --token-file) or the operator password (FENCELINE_ADMIN_PASSWORD or --password-file)")
    return password, launcher_token


def _identity(runtime: str, seat: str | None) -> tuple[str, dict[str, str] | None]:
    """The seat, and the Pod under the kubernetes runtime, whose name is the seat."""
    if runtime == "local":
        host = socket.gethostname().split(".")[0] or "local"
        return seat or f"worker-{host}", None
    pod = {field: os.environ.get(name, "").strip() for field, name in POD_ENV.items()}
    if missing := [POD_ENV[field] for field, value in pod.items() if not value]:
        raise ValueError(f"--runtime kubernetes needs {', '.join(missing)} from the downward API "
                         "(metadata.namespace, metadata.name, metadata.uid): see deploy/kubernetes/worker.yaml")
    if seat and seat != pod["pod_name"]:
        raise ValueError(f"under --runtime kubernetes the seat is the Pod's name ({pod['pod_name']!r}), "
                         f"not {seat!r}")
    return pod["pod_name"], pod
