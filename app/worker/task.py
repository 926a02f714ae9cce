"""One claimed attempt, from `running` to its acknowledged outcome.

While the command runs, two threads share the attempt: the task thread watches the process and
nothing else, and a tender thread makes the attempt's calls (heartbeats, log chunks, renewals).
So when the command ends, its outcome is on disk at once, whatever the network is doing: no
call that hangs stands between the process's exit and the journal.
"""

import contextvars
import logging
import os
import signal
import subprocess
import threading
import time
from typing import Any

from app.telemetry.traceparent import w3c_trace_id
from app.worker import tracing
from app.worker.api import Backoff, GaveUp, Refused, ServerUnreachable, Stale, retrying
from app.worker.context import Context
from app.worker.deliver import deliver
from app.worker.logship import LogShipper, append_line
from app.worker.process import ExitWatch, ReportedOutcome, classify, command_of, exited, signal_group, spawn, task_env
from app.worker.state import attempt_key, describe
from app.worker.tokens import unverified_claims

TICK = 0.2  # how often a running task is looked at: log shipping latency, stop latency
KILL_AFTER = 3.0  # seconds between SIGTERM and SIGKILL when the worker stops a task


class Lost(Exception):
    """The attempt is no longer this worker's (stale-report, or its credential was refused)."""


def renew_delay(token: str) -> float:
    """Half the token's lifetime (exp - iat), read without verifying: only the server verifies."""
    claims = unverified_claims(token)
    try:
        return max(1.0, (claims["exp"] - claims["iat"]) / 2)
    except (KeyError, TypeError):
        return 60.0


class TaskRunner:
    AGENT = "fenceline-worker"  # the name on the lines it adds to the attempt's log

    def __init__(self, ctx: Context, item: dict[str, Any]) -> None:
        self.ctx = ctx
        self.correlation: dict[str, Any] = item["correlation"]
        # The attempt's identity on each of its lines (fields of a JSON line, app/telemetry/logconfig.py).
        self.log = logging.LoggerAdapter(ctx.log, {
            **{k: self.correlation.get(k) for k in ("ti_id", "try_number", "attempt_epoch")},
            "trace_id": w3c_trace_id(str(self.correlation.get("trace_id") or ""))})
        self.payload: dict[str, Any] = item["payload"]
        self.key = attempt_key(self.correlation)
        self.name = describe(self.correlation)
        self.token: str = item["attempt_token"]
        self.renew_at = time.monotonic() + renew_delay(self.token)
        self.next_beat = 0.0
        self.record: dict[str, Any] = {"correlation": self.correlation, "payload": self.payload,
                                       "attempt_token": self.token, "pgid": None}
        self.traceparent: str | None = None  # the run's trace, while the attempt runs (app/worker/tracing.py)
        self.unreachable = False  # set during an outage, so it is logged once
        self.shipping = True
        # A log the server cannot take now (unreachable, or its log store full) waits in the
        # spool and is offered again with back-off, not on every tick.
        self.ship_backoff, self.ship_at = Backoff(base=TICK), 0.0
        self.shipper = LogShipper(ctx.api, ctx.state.spool(self.key), lambda: self.token,
                                  log=lambda m: ctx.log.warning("%s: %s", self.name, m))
        # Set (under `reaping`) when the task thread is about to reap the command: from then
        # on its process group ID may be reused, so the tender no longer signals it.
        self.ended, self.reaping = threading.Event(), threading.Lock()
        self.lost: Lost | None = None  # what the tender learned: the attempt is no longer ours

    def run(self) -> None:
        self.ctx.state.save_attempt(self.key, self.record)
        try:
            with tracing.attempt(self.correlation) as self.traceparent:
                self._run()
        except GaveUp:
            pass  # the outcome stays journaled for the next start
        except Exception:  # one task's bug must not take the worker down
            self.log.exception("%s: worker error", self.name)

    def _run(self) -> None:
        argv = command_of(self.payload)
        if not argv:
            # An image payload is for a Kubernetes launcher; this worker cannot place it.
            self._finish(ReportedOutcome("unexecutable", "dispatch_failed", "the payload has no command to run"))
            return
        if not self._report_running():
            return
        env = task_env(self.payload, self.correlation, dict(os.environ), self.traceparent)
        try:
            proc = spawn(argv, env, self.ctx.state.spool(self.key))
        except OSError as exc:  # the user's command cannot be started: its own failure
            self._finish(ReportedOutcome("failed", None, f"cannot start {argv[0]!r}: {exc.strerror or exc}"))
            return
        self.record["pgid"] = proc.pid
        self.ctx.state.save_attempt(self.key, self.record)
        self.log.info("%s: started %s (pid %d)", self.name, argv[0], proc.pid)
        # The tender runs in this thread's context: its calls carry the run's traceparent.
        tender = threading.Thread(target=contextvars.copy_context().run, args=(self._tend_until_ended, proc.pid),
                                  name=f"tend-{self.key}", daemon=True)
        tender.start()
        try:
            stopped_for = self._supervise(proc)
        except Lost as exc:
            self.log.warning("%s: %s — killed its process group, reporting nothing", self.name, exc)
            self.ctx.state.forget_attempt(self.key)
            return
        finally:
            with self.reaping:
                self.ended.set()
            # The leader is not reaped yet, so its group ID cannot have been recycled: whatever
            # the task left behind in its group goes with it.
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        self._finish(classify(proc.returncode, stopped_for), tender)

    def _report_running(self) -> bool:
        """`running` acknowledged before user code starts (a non-idempotent task relies on
        it). A claim the worker will not start after all is handed back, spending nothing."""
        try:
            if self.ctx.stopping.is_set():
                raise GaveUp("stopping")
            retrying(lambda: self.ctx.api.report(self.token, "running"), what=f"{self.name}: running",
                     give_up=self.ctx.stopping.is_set, log=self.log.info)
            return True
        except GaveUp:
            self._hand_back()
            return False
        except Refused as exc:
            self.log.warning("%s: running refused (%s); not started", self.name, exc)
        self.ctx.state.forget_attempt(self.key)
        return False

    def _hand_back(self) -> None:
        try:
            self.ctx.api.release(self.token)
            self.log.info("%s: handed back unstarted (worker stopping)", self.name)
        except Refused as exc:
            if exc.type == "attempt-started":
                # `running` landed though its answer was lost: the server counts the attempt as
                # started, so it ends with an outcome, the infra fault it is.
                self._finish(ReportedOutcome("unexecutable", "worker_lost",
                                             "the worker stopped before starting the command"))
                return
            self.log.info("%s: not handed back (%s); the server's reapers re-place it", self.name, exc)
        except ServerUnreachable as exc:
            self.log.info("%s: not handed back (%s); the server's reapers re-place it", self.name, exc)
        self.ctx.state.forget_attempt(self.key)

    def _supervise(self, proc: subprocess.Popen) -> str | None:
        """Watch the command until it ends; answers why the worker stopped it, if it did.
        Raises Lost (after a SIGKILL of the group) when the server says should_terminate."""
        watch = ExitWatch(proc.pid)
        try:
            return self._watch(proc, watch)
        finally:
            watch.close()

    def _watch(self, proc: subprocess.Popen, watch: ExitWatch) -> str | None:
        timeout = self.payload.get("timeout_seconds")
        started, stopped_for, signalled_at = time.monotonic(), None, None
        while True:
            if self.lost is not None:  # looked at first: the tender's SIGKILL also ends the command
                raise self.lost
            if exited(proc):
                return stopped_for
            watch.wait(TICK)  # woken when it ends: a short task is not held for the tick
            now = time.monotonic()
            if stopped_for is None:
                if timeout and now - started >= timeout:
                    stopped_for = "deadline"
                elif self.ctx.halt.is_set():
                    stopped_for = "shutdown"
                if stopped_for:
                    self.log.info("%s: stopping it (%s)", self.name, stopped_for)
                    signal_group(proc.pid, signal.SIGTERM)
                    signalled_at = now
            elif signalled_at is not None and now - signalled_at >= KILL_AFTER:
                signal_group(proc.pid, signal.SIGKILL)
                signalled_at = None

    def _tend_until_ended(self, pgid: int) -> None:
        """The tender: the attempt's calls, once per tick until the command ends. On
        should_terminate it SIGKILLs the process group at once (a newer attempt owns this
        work), unless the task thread has already taken the command's end."""
        self.next_beat = time.monotonic() + self.ctx.settings.heartbeat_interval
        try:
            while not self.ended.wait(TICK):
                self._tend(time.monotonic())
        except Lost as exc:
            with self.reaping:
                self.lost = exc
                if not self.ended.is_set():
                    signal_group(pgid, signal.SIGKILL)
        except Exception:  # a bug here must not leave the task unwatched: the task thread goes on
            self.log.exception("%s: worker error in the attempt's calls", self.name)

    def _tend(self, now: float, beat: bool = True) -> None:
        """While the attempt runs: ship what its log has new, heartbeat (when `beat`) and renew
        its token when due. Raises Lost on should_terminate."""
        if self.shipping and now >= self.ship_at and self.shipper.pending():
            if self._talk("log", self._ship):
                self.ship_backoff = Backoff(base=TICK)
            else:
                self.ship_at = now + self.ship_backoff.next_delay()
        if beat and now >= self.next_beat:
            hb = self.ctx.settings.heartbeat_interval
            self.next_beat = now + (hb if self._talk("heartbeat", lambda: self.ctx.api.heartbeat(self.token))
                                    else min(hb, 1.0))
        if now >= self.renew_at:
            self._talk("renew", self._renew)

    def _talk(self, what: str, call: Any) -> bool:
        """One agent write while the task runs; False if the server could not be reached
        (tried again on a later tick). Raises Lost on should_terminate or a refused credential."""
        try:
            call()
            if self.unreachable:
                self.unreachable = False
                self.log.info("%s: server reachable again", self.name)
            return True
        except Stale as exc:
            raise Lost(f"{what} answered {exc.type} (should_terminate)") from exc
        except Refused as exc:
            if exc.status == 401:
                raise Lost(f"{what}: attempt token refused ({exc})") from exc
            self.log.warning("%s: %s refused: %s", self.name, what, exc)
        except ServerUnreachable as exc:
            if not self.unreachable:  # once per outage, not once per tick
                self.unreachable = True
                self.log.warning("%s: %s: server unreachable (%s); the task runs on, its log "
                                     "waits on disk and is retried with back-off", self.name, what, exc)
        return False

    def _ship(self) -> None:
        try:
            self.shipper.ship_once()
        except Refused as exc:
            if isinstance(exc, Stale) or exc.status == 401:
                raise
            # Say so once, not on every tick (a 413 past the per-attempt limit stays a 413).
            self.shipping = False
            self.log.warning("%s: log append refused (%s); the rest of this attempt's log is not shipped",
                                 self.name, exc)

    def _renew(self) -> None:
        self.token = self.ctx.api.renew(self.token)
        self.renew_at = time.monotonic() + renew_delay(self.token)
        self.record["attempt_token"] = self.token
        self.ctx.state.save_attempt(self.key, self.record)

    def _finish(self, outcome: ReportedOutcome, tender: threading.Thread | None = None) -> None:
        """Journal the outcome (durably, before anything is sent, and before waiting on the
        `tender`'s call in flight), then deliver it."""
        suffix = f" ({outcome.reason})" if outcome.reason else ""
        append_line(self.ctx.state.spool(self.key),
                    f"[{self.AGENT}] {outcome.why}: reporting {outcome.state}{suffix}")
        entry = {"name": self.name, "correlation": self.correlation, "attempt_token": self.token,
                 "state": outcome.state, "reason": outcome.reason, "why": outcome.why,
                 "reschedule_at": outcome.reschedule_at, **self._log_position()}
        self.ctx.state.journal(self.key, entry)
        if self.ctx.crash_after_journal:
            self.log.warning("%s: test hook: dying after journaling %s", self.name, outcome.state)
            os.kill(os.getpid(), signal.SIGKILL)
        if tender is not None:
            # One call of an attempt at a time: the delivery follows the tender's last call, and
            # starts from the log position and token that call left.
            tender.join()
            entry.update(attempt_token=self.token, **self._log_position())
        deliver(self.ctx, self.key, entry)

    def _log_position(self) -> dict[str, int]:
        file_pos, server_size = self.shipper.at
        return {"file_pos": file_pos, "server_size": server_size}
