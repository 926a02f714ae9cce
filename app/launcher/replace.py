"""A Pod that replaces an earlier attempt's (contract 9.3, 9.5): before it is created, the Pods
of the task instance's earlier attempts, whichever launcher made them, alive or not, are
deleted (by name, with the UID they were listed with), and it is created once each is gone or
terminal, as Kubernetes Jobs' `podReplacementPolicy: Failed` creates a replacement. The wait is
bounded (--replacement-wait): past it the Pod is created anyway, and how long an earlier Pod
still ran beside it is the overlap that fenceline_attempt_overlap_seconds measures.
"""

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from app.launcher import outcome as pods
from app.launcher.kube import Kube, KubeRefused, KubeUnreachable
from app.launcher.metrics import attempt_overlap
from app.launcher.pod import superseded_by, ti_selector


class Predecessors:
    """The Pods of the earlier attempts of one attempt's task instance."""

    def __init__(self, kube: Kube, correlation: dict[str, Any], interval: float, log: logging.LoggerAdapter,
                 name: str) -> None:
        self.kube, self.correlation, self.interval, self.log, self.name = kube, correlation, interval, log, name
        self.running: dict[str, str] = {}  # uid: name, of those the latest look found still running
        self.asked: set[str] = set()  # the UIDs this launcher asked to delete
        self.overlap_from: float | None = None  # monotonic; set while the replacement runs beside one
        self.next_look = 0.0

    def look(self) -> bool:
        """List them, delete each that no one is deleting yet, and answer whether any still
        runs (KubeUnreachable, KubeRefused when the API server does not list them)."""
        found = [p for p in self.kube.list(ti_selector(self.correlation)) if superseded_by(p, self.correlation)]
        # Known before any delete, so a delete that fails still leaves them counted as running.
        self.running = {p["metadata"]["uid"]: p["metadata"]["name"] for p in found if not pods.stopped(p)}
        for pod in found:
            meta = pod["metadata"]
            if meta["uid"] in self.asked or meta.get("deletionTimestamp"):
                continue
            if self.kube.delete(meta["name"], meta["uid"]):
                self.log.info("%s: deleted Pod %s of a superseded attempt (launcher %s)", self.name, meta["name"],
                              (meta.get("labels") or {}).get("fenceline.io/launcher", "?"))
            self.asked.add(meta["uid"])  # only once the API server answered: a failed delete is asked again
        return bool(self.running)

    def wait_stopped(self, wait: float, stopping: threading.Event, tend: Callable[[], None]) -> None:
        """Delete them and wait until none runs, at most `wait` seconds (or until the launcher
        stops), calling `tend` (the attempt's heartbeat) on every turn."""
        deadline, said = time.monotonic() + wait, False
        while True:
            try:
                if not self.look():
                    return
            except (KubeUnreachable, KubeRefused) as exc:  # what it last saw still stands
                if not said:  # once per wait
                    said = True
                    self.log.warning("%s: the Pods of earlier attempts not listed or not deleted (%s); trying "
                                     "again until --replacement-wait runs out", self.name, exc)
            tend()
            left = deadline - time.monotonic()
            if left <= 0 or stopping.wait(min(self.interval, left)):
                break
        if self.running and not stopping.is_set():
            self.log.warning("%s: Pod %s of a superseded attempt still not stopped after %.0fs (--replacement-wait): "
                             "creating the replacement beside it", self.name, ", ".join(self.running.values()), wait)

    # the overlap ------------------------------------------------------------------------------

    def replacement_created(self) -> None:
        """The replacement Pod exists: its overlap starts now, or is 0 if none runs."""
        if self.running:
            self.overlap_from = time.monotonic()
        else:
            attempt_overlap.observe(0.0)

    def tend(self, now: float) -> None:
        """While the replacement runs beside an earlier Pod: has that one stopped now? (Asked
        once a poll interval.)"""
        if self.overlap_from is None or now < self.next_look:
            return
        self.next_look = now + self.interval
        try:
            if self.look():
                return
        except (KubeUnreachable, KubeRefused):
            return
        self.overlap_ended()

    def overlap_ended(self) -> None:
        """The earlier Pods stopped, or the replacement's attempt ended: the overlap is known."""
        if self.overlap_from is not None:
            lasted, self.overlap_from = time.monotonic() - self.overlap_from, None
            attempt_overlap.observe(lasted)
            self.log.warning("%s: ran beside a superseded attempt's Pod for %.1fs", self.name, lasted)
