"""Entry point of `fenceline worker`: settings, logging, the worker's exit status."""

import argparse
import logging
import sys

from app.telemetry.logconfig import formatter
from app.worker import tracing
from app.worker.agent import EXIT_ERROR, EXIT_SETTINGS, Worker
from app.worker.settings import from_args
from app.worker.state import StateDirBusy


def agent_log(kind: str, seat: str, log_format: str) -> logging.Logger:
    """An agent's own log (`fenceline.worker.<seat>`, `fenceline.launcher.<seat>`), on stderr."""
    log = logging.getLogger(f"fenceline.{kind}.{seat}")
    handler = logging.StreamHandler(sys.stderr)
    # app/telemetry/logconfig.py imports only the standard library: the worker still needs nothing of the server.
    handler.setFormatter(formatter(log_format, seat=seat))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    return log


def run_worker(args: argparse.Namespace) -> int:
    try:
        settings = from_args(args)
    except (ValueError, OSError) as exc:
        print(f"fenceline worker: {exc}", file=sys.stderr)
        return EXIT_SETTINGS
    log = agent_log("worker", settings.seat, settings.log_format)
    tracing.start()
    try:
        return Worker(settings, log).run()
    except StateDirBusy as exc:
        log.error("%s", exc)
        return EXIT_ERROR
