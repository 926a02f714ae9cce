"""Whether a worker's main loop still turns: a file it touches, and the probe that reads it.

The claim loop touches `liveness` in the state directory on every turn: at least once per
claim (a claim waits at most the server's limit, 30 s, and its request times out 15 s after
that), once a second while every slot is busy, and once per back-off while the server is
unreachable (no reason to restart a worker). `fenceline worker alive` passes while the
file is younger than --max-age: a hung main loop (a deadlock, a stopped process, a call that
never returns) lets it age and fails the probe, so the kubelet restarts the container
(deploy/kubernetes/worker.yaml). The file is removed when a worker starts (a restarted
container's start-up is not taken for a turning loop) and when it stops.

The probe imports nothing but the worker's settings: an exec probe runs it every few seconds.
"""

import argparse
import sys
import time
from pathlib import Path

from app.worker.settings import as_positive_seconds, state_dir_from

LIVENESS = "liveness"
# A live loop turns within a claim's longest wait (30 s) plus its request's timeout (15 s): 60 s
# leaves room for a loaded node without waiting long for a hung worker.
MAX_AGE_SECONDS = 60.0
EXIT_ALIVE, EXIT_NOT_ALIVE, EXIT_SETTINGS = 0, 1, 2


class Liveness:
    """The liveness file of one state directory, as the worker's main loop keeps it."""

    def __init__(self, state_root: Path) -> None:
        self.path = state_root / LIVENESS

    def beat(self) -> None:
        """The main loop turned."""
        self.path.touch()

    def clear(self) -> None:
        """Not turning (yet, or any more)."""
        self.path.unlink(missing_ok=True)


def staleness(path: Path, max_age: float, now: float | None = None) -> str | None:
    """Why the loop that keeps `path` is not alive, or None while it is."""
    try:
        age = (time.time() if now is None else now) - path.stat().st_mtime
    except FileNotFoundError:
        return f"no {path}: the worker has not reached its claim loop, or has stopped"
    if age > max_age:
        return f"the worker's claim loop last turned {age:.0f}s ago, more than --max-age {max_age:g}s ({path})"
    return None


def add_alive_command(worker: argparse.ArgumentParser) -> None:
    """`fenceline worker alive`, beside the worker's own flags."""
    sub = worker.add_subparsers(dest="worker_command")
    alive = sub.add_parser("alive", help="exit 0 while a worker's claim loop turns (a liveness probe), else 1")
    alive.add_argument("--state-dir", default=None,
                       help="the worker's state directory (else env FENCELINE_WORKER_STATE_DIR, else the worker's "
                            "default for its seat)")
    alive.add_argument("--max-age", type=_max_age, default=MAX_AGE_SECONDS,
                       help=f"seconds after the loop's last turn it is taken for hung (default {MAX_AGE_SECONDS:g})")


def _max_age(raw: str) -> float:
    try:
        return as_positive_seconds(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check_alive(args: argparse.Namespace) -> int:
    """The probe: 0 alive, 1 not alive (one line on stderr says why), 2 a setting is wrong."""
    try:
        state_dir = state_dir_from(args)
    except ValueError as exc:
        print(f"fenceline worker alive: {exc}", file=sys.stderr)
        return EXIT_SETTINGS
    if (why := staleness(state_dir / LIVENESS, args.max_age)) is not None:
        print(f"fenceline worker alive: {why}", file=sys.stderr)
        return EXIT_NOT_ALIVE
    return EXIT_ALIVE
