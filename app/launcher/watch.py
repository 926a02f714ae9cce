"""One listing of the launcher's Pods for all its attempts, and the sweep of the Pods no
attempt holds.

Every `poll_interval` the launcher lists its own Pods (the server-side selector on its
label), once for all attempts: a runner reads its Pod off the latest listing instead of
asking the API server itself. A listing also sweeps: a Pod with the launcher's label that no
runner holds (an attempt that is no longer current, a teardown that could not reach the API
server, a Pod from before a restart whose attempt was settled) is deleted by name with the UID
it was listed with.
"""

import logging
import threading
import time
from pathlib import Path
from typing import Any

from app.launcher.kube import Kube, KubeRefused, KubeUnreachable


class PodWatch:
    def __init__(self, kube: Kube, selector: str, interval: float, log: logging.Logger,
                 alive: Path | None = None) -> None:
        self.kube, self.selector, self.interval, self.log = kube, selector, interval, log
        self.alive = alive  # touched on every turn of the loop: the launcher Pod's liveness probe reads it
        # A listing older than this no longer shows a Pod alive (its attempt stops heartbeating).
        self.stale_after = 3 * interval + 5.0
        self.pods: dict[str, dict[str, Any]] = {}
        self.listed_at = 0.0  # monotonic time at which the latest listing was asked for
        self.held: set[str] = set()
        self.changed = threading.Condition()
        self.stopping = threading.Event()
        self.unreachable = False
        self.thread = threading.Thread(target=self._loop, name="pod-watch", daemon=True)

    def hold(self, name: str) -> None:
        with self.changed:
            self.held.add(name)

    def release(self, name: str) -> None:
        with self.changed:
            self.held.discard(name)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(10)

    def look(self, name: str, since: float) -> tuple[dict[str, Any] | None, bool]:
        """The Pod as the latest listing showed it, and whether that listing is to be believed:
        asked for after `since`, and recent."""
        with self.changed:
            fresh = self.listed_at > since and time.monotonic() - self.listed_at < self.stale_after
            return self.pods.get(name), fresh

    def wait(self, timeout: float) -> None:
        """Until the next listing, or `timeout`."""
        with self.changed:
            self.changed.wait(timeout)

    def list_now(self) -> list[dict[str, Any]]:
        """List the launcher's Pods (KubeUnreachable when the API server does not answer)."""
        asked = time.monotonic()
        found = self.kube.list(self.selector)
        with self.changed:
            self.pods = {p["metadata"]["name"]: p for p in found}
            self.listed_at = asked
            self.changed.notify_all()
        return found

    def _loop(self) -> None:
        while not self.stopping.is_set():
            if self.alive is not None:
                self.alive.touch()
            try:
                found = self.list_now()
                if self.unreachable:
                    self.unreachable = False
                    self.log.info("Kubernetes API reachable again")
                self._sweep(found)
            except KubeUnreachable as exc:
                if not self.unreachable:  # once per outage
                    self.unreachable = True
                    self.log.warning("Kubernetes API unreachable (%s): no Pod is settled, none is vouched for "
                                     "(their attempts stop heartbeating) until it answers", exc)
            except KubeRefused as exc:
                self.log.error("listing the launcher's Pods refused: %s", exc)
            self.stopping.wait(self.interval)

    def _sweep(self, found: list[dict[str, Any]]) -> None:
        for pod in found:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                continue  # being deleted: listed until its kubelet confirms it stopped
            with self.changed:
                if meta["name"] in self.held:
                    continue
            if self.kube.delete(meta["name"], meta["uid"]):
                self.log.info("deleted Pod %s: no current attempt of this launcher holds it", meta["name"])
