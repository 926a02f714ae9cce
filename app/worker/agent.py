"""The worker process: admit itself for its seat, claim work, run it, stop cleanly.

Start-up order matters: journaled outcomes are re-delivered first (while their epochs may
still be live), what the previous process left running is killed, and only then is the seat
admitted anew — superseding the predecessor, whose in-flight attempts the server then
re-places (worker-lost).
"""

import logging
import os
import signal
import socket
import threading
import time
import uuid
from typing import Any

from app.worker.api import Api, Backoff, GaveUp, Refused, ServerUnreachable, Stale, retrying
from app.worker.context import Context
from app.worker.deliver import hand_back_lost, redeliver_journal
from app.worker.kubernetes import PodSuperseded, SeatContested, admit_pod
from app.worker.liveness import Liveness
from app.worker.process import kill_orphans
from app.worker.settings import WorkerSettings
from app.worker.state import StateDir, describe
from app.worker.task import TaskRunner

# Exit statuses of `fenceline worker` (EXIT_SETTINGS: a setting is wrong).
EXIT_OK, EXIT_ERROR, EXIT_SETTINGS, EXIT_SEAT_TAKEN, EXIT_SUPERSEDED = 0, 1, 2, 3, 4


# Back-off between claims while the server is unreachable, at most this long.
UNREACHABLE_CAP_SECONDS = 5.0
# How many --batch-ticks slots freed one by one wait to be claimed together: a claim is a
# request, a transaction and a token per task, so fewer, larger claims spend less server and
# PostgreSQL CPU on each short task (bench/short_tasks.py measures it).
GATHER_TICKS = 2


class ClaimInterrupted(BaseException):
    """Raised by the stop signal's handler into a waiting claim in flight: it is abandoned."""


class Fatal(Exception):
    """The worker cannot go on; the message says why, the code is the exit status."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


class Worker:
    ROLE = "worker"  # the admitted seat's role (the launcher's is "launcher")

    def __init__(self, settings: WorkerSettings, log: logging.Logger | None = None) -> None:
        self.settings = settings
        log = log or logging.getLogger("fenceline.worker")
        self.ctx = Context(api=Api(settings.server, batch_tick=settings.batch_tick, log=log.info),
                           state=StateDir(settings.state_dir), settings=settings, log=log)
        self.worker_token = ""
        self.execution_id = ""
        self.threads: list[threading.Thread] = []
        self._claiming = False  # a waiting claim is in flight (on the main thread)
        self.liveness = Liveness(self.ctx.state.root)  # `fenceline worker alive` reads it (app/worker/liveness.py)
        self._gather_until: float | None = None  # when slots freed meanwhile are claimed (_gathering)

    @property
    def log(self) -> logging.Logger:
        return self.ctx.log

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT (or until superseded); answers the exit status."""
        self.ctx.state.lock()
        self.liveness.clear()
        self._install_signal_handlers()
        try:
            redeliver_journal(self.ctx)
            self._kill_leftovers()
            self._admit()
            self._claim_loop()
            return EXIT_OK
        except GaveUp:
            return EXIT_OK  # stopped while the server was unreachable; the journal keeps what is owed
        except Fatal as exc:
            self.log.error("%s", exc)
            return exc.code
        finally:
            self._drain()
            self.ctx.api.close()
            self.liveness.clear()

    # start-up --------------------------------------------------------------------------------

    def _kill_leftovers(self) -> None:
        """Attempts a previous process of this state directory held but never settled: kill
        what is left of them. Locally the server re-places them once this admission
        supersedes that process's execution; in a Pod whose container restarted, the
        execution stays the same, so each is reported worker_lost here (its epoch is live)."""
        for key, record in self.ctx.state.attempts().items():
            if key in self.ctx.state.journaled():
                continue
            c = record["correlation"]
            killed = 0
            if record.get("pgid"):
                killed = kill_orphans(record["pgid"], [f"FENCELINE_TI_ID={c['ti_id']}",
                                                       f"FENCELINE_ATTEMPT_EPOCH={c['attempt_epoch']}"])
            if self.settings.runtime == "kubernetes":
                self.log.info("%s: left by the previous container (%d process(es) still running, killed)",
                              describe(c), killed)
                hand_back_lost(self.ctx, key, record)
                continue
            self.log.info("%s: left by the previous worker (%d process(es) still running, killed); the server "
                          "re-places it as worker_lost", describe(c), killed)
            self.ctx.state.forget_attempt(key)

    def _admission_body(self, previous: str | None) -> dict[str, Any]:
        return {"swarm": self.settings.swarm, "role": self.ROLE, "labels": {"agent": f"fenceline-{self.ROLE}"},
                "runtime_backend": "local", "runtime_target": {"server_id": socket.gethostname()[:253],
                                                               "pid": os.getpid()},
                "previous_execution_id": previous}

    def _login(self) -> str:
        """An operator token from the configured username and password."""
        try:
            return self._call(lambda: self.ctx.api.login(self.settings.username, self.settings.password), "log in")
        except Refused as exc:
            raise Fatal(f"operator login as {self.settings.username!r} refused ({exc.status}): check the "
                        "credentials (FENCELINE_ADMIN_USERNAME, FENCELINE_ADMIN_PASSWORD or --password-file)") from exc

    def _admit(self) -> None:
        operator = self.settings.launcher_token or self._login()
        if self.settings.runtime == "kubernetes":
            self._admit_pod(operator)
        else:
            self._admit_local(operator)
        self.ctx.api.coalescer.start(self.worker_token, self.execution_id)  # its attempts' writes, together

    def _admit_pod(self, operator: str) -> None:
        """Admit this Pod, or re-attach to its execution (app/worker/kubernetes.py)."""
        try:
            admitted, reattached = admit_pod(self.ctx, operator, self._call)
        except PodSuperseded as exc:
            raise Fatal(str(exc), EXIT_SUPERSEDED) from exc
        except SeatContested as exc:
            raise Fatal(str(exc), EXIT_SEAT_TAKEN) from exc
        except Refused as exc:
            raise Fatal(f"admission refused: {exc}") from exc
        self.worker_token, self.execution_id = admitted["worker_token"], admitted["execution_id"]
        pod = self.settings.pod or {}
        if reattached:
            how = "re-attached to its own execution after a container restart"
        else:
            previous = admitted["previous_execution_id"]
            how = f"superseding {previous}" if previous else "the seat's first execution"
        self.log.info("admitted Pod %s/%s (uid %s) as seat %s: execution %s (generation %d, %s); concurrency %d",
                      pod.get("pod_namespace"), pod.get("pod_name"), pod.get("pod_uid"), self.settings.seat,
                      self.execution_id, admitted["generation"], how, self.settings.concurrency)

    def _admit_local(self, operator: str) -> None:
        """Admit a new execution of the seat, naming the one this state directory last held.
        An admission cut short by a crash is replayed first (same Idempotency-Key), so its
        execution, not an older one, is the predecessor."""
        state, seat = self.ctx.state, self.settings.seat
        known = state.execution
        if known and known.get("seat") != seat:
            raise Fatal(f"{state.root} belongs to seat {known.get('seat')!r}, not {seat!r}: use another --state-dir")
        previous = known["execution_id"] if known else None
        if (pending := state.pending_admission) is not None:
            try:
                replayed = self._call(lambda: self.ctx.api.admit(operator, seat, pending["body"], pending["key"]),
                                      "replay admission")
                previous = replayed["execution_id"]
            except Refused as exc:
                self.log.info("an unfinished admission was not replayed (%s)", exc.type)
        key = str(uuid.uuid4())
        body = self._admission_body(previous)
        state.save_pending_admission({"body": body, "key": key})
        try:
            admitted = self._call(lambda: self.ctx.api.admit(operator, seat, body, key), "admission")
        except Refused as exc:
            if exc.type == "stale-predecessor":
                raise Fatal(f"seat {seat!r} is held by execution {exc.problem.get('current_execution_id')}, which "
                            f"this state directory did not admit: is another worker running for this seat?",
                            EXIT_SEAT_TAKEN) from exc
            raise Fatal(f"admission refused: {exc}") from exc
        # The admission itself is kept: replayed under its key, it answers this same execution
        # (the launcher re-attaches to it so; app/launcher/agent.py).
        state.save_execution({"seat": seat, "server": self.settings.server, "execution_id": admitted["execution_id"],
                              "generation": admitted["generation"], "admission": {"body": body, "key": key}})
        state.clear_pending_admission()
        self.worker_token, self.execution_id = admitted["worker_token"], admitted["execution_id"]
        self.log.info("admitted seat %s: execution %s (generation %d%s); concurrency %d; queues %s", seat,
                      self.execution_id, admitted["generation"],
                      f", superseding {previous}" if previous else "", self.settings.concurrency,
                      ",".join(self.settings.queues))

    def _call(self, call: Any, what: str) -> Any:
        """A start-up call, retried while the server is unreachable, until a stop signal."""
        return retrying(call, what=what, stop=self.ctx.stopping, log=self.log.info)

    # serving ---------------------------------------------------------------------------------

    def _claim_loop(self) -> None:
        """While a slot is free, a waiting claim: the server answers as soon as work is ready
        (or with nothing after claim_wait), so an idle worker costs one request per wait."""
        backoff = Backoff(cap=UNREACHABLE_CAP_SECONDS)
        while not self.ctx.stopping.is_set():
            self.liveness.beat()
            self.threads = [t for t in self.threads if t.is_alive()]
            free = self.settings.concurrency - len(self.threads)
            if free <= 0 or (gather := self._gathering(free)) > 0:
                # A task ended (its thread may still be ending), or a signal came.
                self.ctx.wake.wait(1.0 if free <= 0 else gather)
                self.ctx.wake.clear()
                continue
            try:
                for item in self._waiting_claim(free):
                    self._start(item)
                if backoff.failures:
                    self.log.info("claim: server reachable again")
                    backoff = Backoff(cap=UNREACHABLE_CAP_SECONDS)
            except ClaimInterrupted:
                return
            except ServerUnreachable as exc:
                if backoff.failures == 0:  # once per outage
                    self.log.warning("claim: server unreachable (%s); retrying with back-off", exc)
                self.ctx.wake.wait(backoff.next_delay())
                self.ctx.wake.clear()
            except Stale as exc:
                self.ctx.halt_now()
                raise Fatal(f"execution {self.execution_id} can no longer claim ({exc.type}: "
                            f"{exc.problem.get('detail')}); stopping its tasks", EXIT_SUPERSEDED) from exc
            except Refused as exc:
                self.ctx.stopping.set()
                if (limit := _wait_refused(exc)) is not None:
                    raise Fatal(f"--claim-wait (FENCELINE_WORKER_CLAIM_WAIT) {self.settings.claim_wait:g} refused by "
                                f"the server: {limit}", EXIT_SETTINGS) from exc
                raise Fatal(f"claim refused ({exc}); draining and exiting") from exc

    def _gathering(self, free: int) -> float:
        """How much longer to wait for more slots to free up before claiming (0: claim now).
        Slots that free up one by one as tasks end are claimed together, in one request
        GATHER_TICKS --batch-ticks after the first, unless half of them is free already; an idle
        worker, or one that does not batch, claims at once."""
        if free * 2 >= self.settings.concurrency or not self.threads or self.settings.batch_tick <= 0:
            self._gather_until = None
            return 0.0
        now = time.monotonic()
        if self._gather_until is None:
            self._gather_until = now + GATHER_TICKS * self.settings.batch_tick
        if now >= self._gather_until:
            self._gather_until = None
            return 0.0
        return self._gather_until - now

    def _waiting_claim(self, limit: int) -> list[dict[str, Any]]:
        """One waiting claim, which a stop signal interrupts (the signal handler raises
        ClaimInterrupted): the connection closes, and the server claims nothing for a client
        that has gone."""
        self._claiming = True
        try:
            if self.ctx.stopping.is_set():
                raise ClaimInterrupted
            return self.ctx.api.claim(self.worker_token, limit, self.settings.queues,
                                       wait=self.settings.claim_wait)
        finally:
            self._claiming = False

    def _runner(self, item: dict[str, Any]) -> TaskRunner:
        """What runs one claimed WorkItem (the launcher's runs it as a Pod)."""
        return TaskRunner(self.ctx, item)

    def _start(self, item: dict[str, Any]) -> None:
        runner = self._runner(item)
        self.log.info("%s: claimed", runner.name)
        self._run_in_thread(runner)

    def _run_in_thread(self, runner: TaskRunner) -> None:
        def run() -> None:
            try:
                runner.run()
            finally:
                self.ctx.wake.set()  # a slot is free

        thread = threading.Thread(target=run, name=f"task-{runner.key}", daemon=True)
        self.threads.append(thread)
        thread.start()

    # stopping --------------------------------------------------------------------------------

    def _install_signal_handlers(self) -> None:
        def on_signal(signum: int, _frame: Any) -> None:
            if self.ctx.stopping.is_set():
                self.log.info("%s again: stopping running tasks now", signal.Signals(signum).name)
                self.ctx.halt_now()
                return
            self.log.info("%s: no new claims; running tasks have %.0fs to finish", signal.Signals(signum).name,
                          self.settings.grace_period)
            self.ctx.stopping.set()
            self.ctx.wake.set()
            if self._claiming:
                raise ClaimInterrupted

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)

    def _drain(self) -> None:
        """Let running tasks finish within the grace period, then stop the rest: they are
        reported unexecutable (worker_lost), never as application failures."""
        self.ctx.stopping.set()
        deadline = time.monotonic() + self.settings.grace_period
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self.threads):
            self.ctx.halt_now()
        for thread in self.threads:
            thread.join()
        self.log.info("stopped")


def _wait_refused(refusal: Refused) -> str | None:
    """What the server said of a claim's wait_seconds, when that is why it refused the claim
    (422): the longest wait is the server's rule, which the worker learns this way."""
    if refusal.status != 422:
        return None
    for error in refusal.problem.get("errors") or []:
        if isinstance(error, dict) and list(error.get("loc") or [])[-1:] == ["wait_seconds"]:
            return str(error.get("msg", "out of range"))
    return None
