"""The launcher process: the worker's agent (admission, claim loop, journal, drain) with a
Pod per attempt where the worker has a process (app/worker/agent.py).

Start-up order:

1. Journaled outcomes are re-delivered.
2. The Pods of the attempts this state directory still holds are adopted, each by a runner
   that takes it up where it is (running, ended, or gone).
3. The launcher re-attaches to its own execution by replaying the admission that created it
   (the same Idempotency-Key answers the same execution), so the server re-places none of its
   attempts.
4. It claims.

Pods that no current attempt holds are deleted by the listing's sweep (app/launcher/watch.py).
"""

import logging
from typing import Any

from app.launcher.kube import Kube, KubeUnreachable, default_namespace, load_configuration
from app.launcher.pod import LAUNCHER, is_attempt_pod, label_safe
from app.launcher.runner import PodRunner
from app.launcher.settings import LauncherSettings
from app.launcher.watch import PodWatch
from app.worker.agent import EXIT_SEAT_TAKEN, Fatal, Worker
from app.worker.api import Backoff, GaveUp, Refused
from app.worker.state import describe

# In the state directory, touched every poll_interval while the launcher's loops turn (the
# liveness probe of deploy/kubernetes/launcher/).
ALIVE = "alive"


class Launcher(Worker):
    ROLE = "launcher"
    settings: LauncherSettings

    def __init__(self, settings: LauncherSettings, log: logging.Logger | None = None,
                 kube: Kube | None = None) -> None:
        super().__init__(settings, log or logging.getLogger("fenceline.launcher"))
        if kube is None:
            namespace = settings.namespace or default_namespace(settings.kubeconfig, settings.kube_context)
            kube = Kube(load_configuration(settings.kubeconfig, settings.kube_context), namespace)
        self.kube = kube
        self.watch = PodWatch(kube, f"{LAUNCHER}={label_safe(settings.seat)}", settings.poll_interval, self.log,
                              alive=self.ctx.state.root / ALIVE)

    def _runner(self, item: dict[str, Any]) -> PodRunner:
        return PodRunner(self.ctx, item, self.kube, self.watch)

    # admission ----------------------------------------------------------------------------

    def _admit(self) -> None:
        """Re-attach to the execution this state directory was admitted as; else admit anew,
        taking the seat over when the state directory is new but the seat is not."""
        operator = self.settings.launcher_token or self._login()
        state, seat = self.ctx.state, self.settings.seat
        known = state.execution or {}
        if known.get("seat") == seat and (admission := known.get("admission")):
            try:
                admitted = self._call(lambda: self.ctx.api.admit(operator, seat, admission["body"], admission["key"]),
                                      "re-attach")
                self.worker_token, self.execution_id = admitted["worker_token"], admitted["execution_id"]
                self.log.info("re-attached to execution %s of seat %s (generation %d); namespace %s; queues %s",
                              self.execution_id, seat, admitted["generation"], self.kube.namespace,
                              ",".join(self.settings.queues))
                return
            except Refused as exc:
                self.log.warning("could not re-attach to execution %s (%s); admitting anew", known["execution_id"], exc)
        try:
            self._admit_local(operator)
        except Fatal as exc:
            current = getattr(exc.__cause__, "problem", {}).get("current_execution_id")
            if exc.code != EXIT_SEAT_TAKEN or known or not current:
                raise
            # A new state directory (a new volume): its attempts are gone with it, so the seat's
            # execution is superseded and the server re-places what it held.
            self.log.warning("seat %s is held by execution %s, which this new state directory cannot re-attach "
                             "to: taking the seat over", seat, current)
            state.save_execution({"seat": seat, "execution_id": current})
            self._admit_local(operator)
        self.log.info("namespace %s", self.kube.namespace)

    # start-up: adoption -------------------------------------------------------------------

    def _kill_leftovers(self) -> None:
        """Adopt the Pod of each attempt this state directory still holds (never kill it: the
        attempt's epoch may still be live); the sweep then deletes the Pods no attempt holds."""
        pods = self._list_pods()
        journaled = self.ctx.state.journaled()
        for key, record in self.ctx.state.attempts().items():
            if key in journaled:
                continue  # its outcome waits to be delivered at the next start
            correlation = record["correlation"]
            mine = [p for p in pods if is_attempt_pod(p, correlation)
                    and record.get("pod_uid") in (None, p["metadata"]["uid"])]
            if mine:
                record = {**record, "pod_uid": mine[0]["metadata"]["uid"]}
                self.log.info("%s: adopting Pod %s", describe(correlation), mine[0]["metadata"]["name"])
            elif record.get("pod_uid"):
                self.log.info("%s: its Pod is gone", describe(correlation))
            item = {"payload": record["payload"], "correlation": correlation, "attempt_token": record["attempt_token"]}
            self._run_in_thread(PodRunner(self.ctx, item, self.kube, self.watch, record=record))
        self.watch.start()

    def _list_pods(self) -> list[dict[str, Any]]:
        backoff = Backoff(cap=5.0)
        while True:
            try:
                return self.watch.list_now()
            except KubeUnreachable as exc:
                if backoff.failures == 0:
                    self.log.warning("Kubernetes API unreachable (%s); its Pods are adopted once it answers", exc)
            if self.ctx.stopping.wait(backoff.next_delay()):
                raise GaveUp("adoption")

    def _drain(self) -> None:
        try:
            super()._drain()
        finally:
            self.watch.stop()
            self.kube.close()
