"""Entry points of `fenceline launcher` and `fenceline launcher pod-spec`."""

import argparse
import json
import sys
from typing import Any

from app.launcher import metrics
from app.launcher.pod import manifest
from app.launcher.settings import from_args, pod_spec_settings
from app.worker import tracing
from app.worker.main import agent_log
from app.worker.state import StateDirBusy

EXIT_ERROR, EXIT_USAGE = 1, 2
EXTRA = "fenceline launcher needs the kubernetes extra: pip install 'fenceline[kubernetes]'"


def run_launcher(args: argparse.Namespace) -> int:
    try:
        settings = from_args(args)
    except (ValueError, OSError) as exc:
        print(f"fenceline launcher: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        from app.launcher.agent import Launcher
        from app.launcher.kube import config
    except ImportError:
        print(EXTRA, file=sys.stderr)
        return EXIT_USAGE
    log = agent_log("launcher", settings.seat, settings.log_format)
    try:
        launcher = Launcher(settings, log)
    except (config.ConfigException, OSError) as exc:
        print(f"fenceline launcher: no Kubernetes configuration: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if settings.metrics_port is not None:
        try:
            metrics.serve(settings.metrics_port)
        except OSError as exc:
            print(f"fenceline launcher: --metrics-port {settings.metrics_port}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_USAGE
    tracing.start()
    try:
        return launcher.run()
    except StateDirBusy as exc:
        log.error("%s", exc)
        return EXIT_ERROR


def pod_spec(args: argparse.Namespace) -> int:
    """Print, as YAML, the Pod that a WorkItem (as POST /v1/dispatch/claim returns it) gets."""
    try:
        import yaml
    except ImportError:
        print(EXTRA, file=sys.stderr)
        return EXIT_USAGE
    try:
        text = sys.stdin.read() if args.file == "-" else open(args.file).read()
        item: Any = json.loads(text)
        if isinstance(item, dict) and "items" in item:  # a whole claim answer: its first item
            item = item["items"][0]
        pod = manifest(item, **pod_spec_settings(args))
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        print(f"fenceline launcher pod-spec: not a WorkItem ({type(exc).__name__}: {exc})", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(yaml.safe_dump(pod, sort_keys=False))
    return 0
