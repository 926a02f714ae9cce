"""One claimed attempt as one Pod: created, watched, its log followed, its outcome read off
the Pod and delivered, the Pod deleted.

A PodRunner is the worker's TaskRunner with a Pod where the process was: the same journal,
`running` report, heartbeats, token renewal, log shipping and delivery (app/worker/task.py),
so it keeps every guarantee the worker keeps. What differs:

- `running` is reported once the container has started, never before (for a task declared
  non-idempotent, a Pod that never started is re-placed; one that did is not);
- the attempt heartbeats only while a fresh listing shows its Pod alive, so a launcher that
  cannot see the API server stops vouching for the Pod (and settles nothing);
- before the Pod is created, the Pods of the task instance's earlier attempts are deleted and
  waited for (app/launcher/replace.py);
- on should_terminate the Pod is deleted at once; when the launcher stops, the Pod runs on,
  and the next start adopts it.
"""

import threading
import time
from typing import Any

from app.launcher import outcome as pods
from app.launcher.kube import Kube, KubeRefused, KubeUnreachable
from app.launcher.pod import is_attempt_pod, manifest, pod_name, try_selector
from app.launcher.replace import Predecessors
from app.launcher.watch import PodWatch
from app.worker.api import Backoff, Refused, Stale, retrying
from app.worker.context import Context
from app.worker.process import ReportedOutcome
from app.worker.task import TICK, Lost, TaskRunner

# After its container ended, how long a Pod's log may take to arrive before the outcome goes.
LOG_DRAIN_SECONDS = 10.0


def stamp_order(stamp: str) -> str:
    """An RFC 3339 timestamp of the kubelet (UTC, up to nine fractional digits, trailing zeros
    dropped) as a string that sorts in time order."""
    base, _, fraction = stamp.rstrip("Z").partition(".")
    return f"{base}.{fraction.ljust(9, '0')}"


def teardown(kube: Kube, correlation: dict[str, Any]) -> list[str]:
    """Delete the attempt's Pod: the try's Pods listed by the server-side selector, the epoch
    filtered here (an absent label is epoch 0), each deleted by name with the UID it was
    listed with, so a Pod created in its place meanwhile is never deleted. Answers the names
    deleted."""
    deleted = []
    for pod in kube.list(try_selector(correlation)):
        if is_attempt_pod(pod, correlation):
            meta = pod["metadata"]
            if kube.delete(meta["name"], meta["uid"]):
                deleted.append(meta["name"])
    return deleted


class PodRunner(TaskRunner):
    AGENT = "fenceline-launcher"

    def __init__(self, ctx: Context, item: dict[str, Any], kube: Kube, watch: PodWatch,
                 record: dict[str, Any] | None = None) -> None:
        super().__init__(ctx, item)
        self.kube, self.watch = kube, watch
        self.pod_name = pod_name(self.correlation)
        self.record.update({"pod_name": self.pod_name, "pod_uid": None, "created_at": None, "running": False})
        if record is not None:  # adopted after a restart: the log is read again from its start
            self.record.update(record)
            self.ctx.state.spool(self.key).unlink(missing_ok=True)
        self.predecessors = Predecessors(kube, self.correlation, ctx.settings.poll_interval, self.log, self.name)
        self.follower: threading.Thread | None = None
        self.log_seen = ""  # the timestamp of the last log line written to the spool
        self.kube_down = False
        watch.hold(self.pod_name)

    def run(self) -> None:
        try:
            super().run()
        finally:
            self.predecessors.overlap_ended()
            self.watch.release(self.pod_name)

    def _run(self) -> None:
        if not self.payload.get("image"):
            self._finish(ReportedOutcome("unexecutable", "dispatch_failed",
                                         "the payload names no image to run as a Pod"))
            return
        if self.record["pod_uid"] is None:
            try:
                self.predecessors.wait_stopped(self.ctx.settings.replacement_wait, self.ctx.stopping,
                                               lambda: self._tend(time.monotonic()))
            except Lost as exc:
                self.log.warning("%s: %s — before its Pod was created, reporting nothing", self.name, exc)
                self.ctx.state.forget_attempt(self.key)
                return
            if not self._create():
                return
        try:
            outcome = self._supervise_pod()
        except Lost as exc:
            self.log.warning("%s: %s — deleting its Pod, reporting nothing", self.name, exc)
            self._teardown()
            self.ctx.state.forget_attempt(self.key)
            return
        if outcome is None:
            self.log.info("%s: launcher stopping; Pod %s runs on, to be adopted at the next start",
                          self.name, self.pod_name)
            return
        self._finish(outcome)
        self._teardown()

    # the Pod's life ---------------------------------------------------------------------

    def _create(self) -> bool:
        """Create the Pod; False if the attempt ended instead (handed back, or dispatch_failed)."""
        body = manifest({"payload": self.payload, "correlation": self.correlation}, namespace=self.kube.namespace,
                        launcher=self.ctx.settings.seat, traceparent=self.traceparent,
                        service_account=self.ctx.settings.service_account)
        deadline, backoff = time.monotonic() + self.ctx.settings.start_deadline, Backoff(base=TICK, cap=5.0)
        while True:
            if self.ctx.stopping.is_set():
                self._hand_back()
                return False
            try:
                created = self.kube.create(body)
                break
            except KubeRefused as exc:
                if exc.status == 409 and (found := self._find_own()) is not None:
                    created = found  # an earlier try of this create landed, its answer did not
                    break
                self._finish(ReportedOutcome("unexecutable", "dispatch_failed", f"the Pod was refused: {exc}"))
                return False
            except KubeUnreachable as exc:
                if time.monotonic() > deadline:
                    self._finish(ReportedOutcome("unexecutable", "dispatch_failed",
                                         f"the Kubernetes API could not be reached to create the Pod ({exc})"))
                    return False
                self._kube_unreachable(exc)
                self.ctx.stopping.wait(backoff.next_delay())
        self.record.update(pod_uid=created["metadata"]["uid"], created_at=time.time())
        self.ctx.state.save_attempt(self.key, self.record)
        self.predecessors.replacement_created()
        self.log.info("%s: created Pod %s (uid %s)", self.name, self.pod_name, self.record["pod_uid"])
        return True

    def _find_own(self) -> dict[str, Any] | None:
        found = [p for p in self.kube.list(try_selector(self.correlation))
                 if p["metadata"]["name"] == self.pod_name and is_attempt_pod(p, self.correlation)]
        return found[0] if found else None

    def _supervise_pod(self) -> ReportedOutcome | None:
        """Watch the Pod until it shows an outcome; None when the launcher stops first.
        Raises Lost when the server says should_terminate."""
        seen: dict[str, Any] | None = None
        since = time.monotonic()  # a listing must start after this for an absence to count
        started_by = (self.record["created_at"] or time.time()) + self.ctx.settings.start_deadline
        while not self.ctx.stopping.is_set():
            pod, fresh = self.watch.look(self.pod_name, since)
            alive = False
            if fresh:
                if pod is not None and (pod["metadata"]["uid"] != self.record["pod_uid"]
                                        or not is_attempt_pod(pod, self.correlation)):
                    pod = None  # another Pod holds the name: not this attempt's
                if pod is None:
                    ended = pods.outcome_of(seen) if seen is not None else None
                    return self._ending(seen, ended or ReportedOutcome(
                        "unexecutable", "node_lost", "the Pod is gone: deleted by someone other than the launcher, "
                        "or lost with its node"))
                seen = pod
                if pods.started(pod):
                    self._started()
                if (ended := pods.outcome_of(pod)) is not None:
                    return self._ending(pod, ended)
                if not pods.started(pod) and time.time() > started_by:
                    return self._ending(pod, pods.never_started(pod, self.ctx.settings.start_deadline))
                alive = True
            now = time.monotonic()
            self.predecessors.tend(now)
            self._tend(now, beat=alive)
            self.watch.wait(TICK)
        return None

    def _started(self) -> None:
        """The container started: say `running` (once), follow its log."""
        if self.follower is None:
            self.follower = threading.Thread(target=self._follow, name=f"log-{self.key}", daemon=True)
            self.follower.start()
        if not self.record["running"]:
            if not self._talk("running", lambda: self.ctx.api.report(self.token, "running")):
                return  # tried again on the next look
            self.record["running"] = True
            self.ctx.state.save_attempt(self.key, self.record)
            self.log.info("%s: Pod %s running", self.name, self.pod_name)

    def _ending(self, pod: dict[str, Any] | None, outcome: ReportedOutcome) -> ReportedOutcome:
        """Before the outcome goes: `running` if user code started (retried while the server
        is unreachable), and the rest of the log."""
        if pod is not None and pods.started(pod) and not self.record["running"]:
            try:
                retrying(lambda: self.ctx.api.report(self.token, "running"), what=f"{self.name}: running",
                         stop=self.ctx.halt, log=self.log.info)
            except Stale as exc:
                raise Lost(f"running answered {exc.type} (should_terminate)") from exc
            except Refused as exc:  # the outcome goes anyway: the server fences it on its own
                self.log.warning("%s: running refused (%s)", self.name, exc)
            self.record["running"] = True
        if self.follower is not None:
            self.follower.join(LOG_DRAIN_SECONDS)
        return outcome

    def _teardown(self) -> None:
        try:
            deleted = teardown(self.kube, self.correlation)
            self.log.info("%s: deleted Pod %s", self.name, ", ".join(deleted) or "(already gone)")
        except (KubeUnreachable, KubeRefused) as exc:  # the sweep of unheld Pods deletes it later
            self.log.warning("%s: Pod %s not deleted (%s); the launcher's sweep deletes it", self.name,
                             self.pod_name, exc)

    # the log ----------------------------------------------------------------------------

    def _follow(self) -> None:
        """The container's log into the attempt's spool, line by line, until the container
        ends; a broken stream is opened again and skips the lines it already wrote (by their
        timestamps)."""
        spool = self.ctx.state.spool(self.key)
        backoff = Backoff(base=TICK, cap=5.0)
        while not self.ctx.stopping.is_set():
            try:
                with spool.open("ab") as out:
                    for line in self.kube.follow_log(self.pod_name):
                        stamp, _, text = line.partition(" ")
                        if (stamp := stamp_order(stamp)) <= self.log_seen:
                            continue
                        out.write(text.encode() + b"\n")
                        out.flush()
                        self.log_seen = stamp
            except KubeRefused as exc:
                if exc.status == 404:
                    return  # the Pod is gone, and its log with it
            except KubeUnreachable as exc:
                self._kube_unreachable(exc)
            pod, _ = self.watch.look(self.pod_name, 0.0)
            if pod is None or pods.terminated(pod) is not None:
                return
            self.ctx.stopping.wait(backoff.next_delay())

    def _kube_unreachable(self, exc: Exception) -> None:
        if not self.kube_down:  # once per outage
            self.kube_down = True
            self.log.warning("%s: Kubernetes API unreachable (%s); retrying", self.name, exc)
