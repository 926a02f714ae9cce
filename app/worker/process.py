"""A task's command as a process: its own process group, the correlation bag in its
environment, how it is stopped, and what its end means."""

import ctypes
import errno
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1
# Signals a program raises on itself when it crashes: an application failure that spends a
# try, not a fault of the machine (re-placing a segfaulting task would only repeat it).
CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT,
                           signal.SIGSYS, signal.SIGTRAP})


@dataclass(frozen=True)
class ReportedOutcome:
    """The outcome an agent (the worker, the launcher) reports for one attempt, and a line saying
    why, for the log."""

    state: str  # success | failed | unexecutable | rescheduled
    reason: str | None
    why: str
    reschedule_at: str | None = None  # ISO 8601, for rescheduled (a Pod's termination message)


def classify(returncode: int, stopped_for: str | None) -> ReportedOutcome:
    """The outcome of a command that ended with `returncode` (negative: killed by that signal).
    `stopped_for` is why the worker itself stopped it (deadline, shutdown), if it did.

    Exit 0 is success and any other exit status an application failure. A signal the worker
    sent maps to its cause. A signal it did not send: SIGKILL is taken as the kernel's OOM
    killer (nothing else on a worker host sends it unannounced), a crash signal (SIGSEGV,
    SIGABRT, …) is the program's own failure, SIGXCPU a CPU limit (deadline_exceeded), and any
    other (SIGTERM, SIGINT, SIGHUP, …) a termination from outside: evicted.
    """
    if stopped_for == "deadline":
        return ReportedOutcome("unexecutable", "deadline_exceeded", "stopped by the worker: timeout_seconds exceeded")
    if stopped_for == "shutdown":
        return ReportedOutcome("unexecutable", "worker_lost",
                               "stopped by the worker: it shut down before the task ended")
    if returncode == 0:
        return ReportedOutcome("success", None, "exited with status 0")
    if returncode > 0:
        return ReportedOutcome("failed", None, f"exited with status {returncode}")
    sig = signal.Signals(-returncode) if -returncode in signal.valid_signals() else None
    name = sig.name if sig else f"signal {-returncode}"
    if sig == signal.SIGKILL:
        return ReportedOutcome("unexecutable", "oom_killed",
                       f"killed by {name}, not sent by the worker: taken as the OOM killer")
    if sig in CRASH_SIGNALS:
        return ReportedOutcome("failed", None, f"crashed with {name}")
    if sig == signal.SIGXCPU:
        return ReportedOutcome("unexecutable", "deadline_exceeded", f"killed by {name}: its CPU time limit")
    return ReportedOutcome("unexecutable", "evicted", f"killed by {name}, not sent by the worker: taken as an eviction")


# The correlation bag, as user code sees it (so it can fence its own external writes).
CORRELATION_ENV = {
    "ti_id": "FENCELINE_TI_ID", "dag_id": "FENCELINE_DAG_ID", "run_id": "FENCELINE_RUN_ID",
    "task_id": "FENCELINE_TASK_ID", "map_index": "FENCELINE_MAP_INDEX", "try_number": "FENCELINE_TRY_NUMBER",
    "attempt_epoch": "FENCELINE_ATTEMPT_EPOCH", "tenant_id": "FENCELINE_TENANT_ID", "trace_id": "FENCELINE_TRACE_ID",
}
# The fence for the stores user code writes to (contract 11.1): the token is the attempt epoch,
# which every rail that starts an attempt raises, and the key is the task instance it fences.
FENCE_ENV = {"attempt_epoch": "FENCELINE_FENCING_TOKEN", "ti_id": "FENCELINE_FENCE_KEY"}


def task_env(payload: dict[str, Any], correlation: dict[str, Any], base: dict[str, str],
             traceparent: str | None = None) -> dict[str, str]:
    """The worker's environment without its own secrets, the correlation bag and the fence,
    then the payload's env (which wins, except over the bag, the fence and TRACEPARENT, the
    run's trace: user code must not be lied to)."""
    env = {k: v for k, v in base.items() if k not in ("FENCELINE_ADMIN_PASSWORD", "FENCELINE_LAUNCHER_TOKEN")}
    env["PYTHONUNBUFFERED"] = "1"  # log lines arrive as they are printed, not when a buffer fills
    env.update(payload.get("env") or {})
    for field, name in (*CORRELATION_ENV.items(), *FENCE_ENV.items()):
        value = correlation.get(field)
        env[name] = "" if value is None else str(value)
    if traceparent is not None:
        env["TRACEPARENT"] = traceparent
    return env


def command_of(payload: dict[str, Any]) -> list[str]:
    return [*(payload.get("command") or []), *(payload.get("args") or [])]


# Looked up once in the worker: the child, between fork and exec, must not load libraries.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


# util-linux's setpriv sets PR_SET_PDEATHSIG and execs the command: started so, the command
# needs no Python code between fork and exec, and Popen can use vfork instead of fork, which
# costs a fraction of the CPU per task that copying the worker for a preexec_fn does.
SETPRIV = shutil.which("setpriv") if _PRCTL is not None else None


def _die_with_parent(parent: int) -> None:
    """In the child, before exec: SIGKILL it when the worker dies, so that a killed worker
    leaves no task running unwatched (Linux; elsewhere a restart's orphan sweep does it)."""
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the worker died before the request took effect
        os._exit(1)


def spawn(argv: list[str], env: dict[str, str], spool: Path) -> subprocess.Popen:
    """Start the command in a new session (its own process group), stdout and stderr
    appended to the spool file, which survives the worker; killed when the worker dies (Linux:
    through setpriv where it is installed, else a preexec_fn)."""
    parent = os.getpid()
    if SETPRIV is not None and (refused := _unstartable(argv[0], env)) is not None:
        raise refused  # as Popen would raise it, not as setpriv's exit status 127
    with spool.open("ab") as out:
        if SETPRIV is not None:
            return subprocess.Popen(
                [SETPRIV, "--pdeathsig", "KILL", "--", *argv], env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)
        return subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=(lambda: _die_with_parent(parent)) if _PRCTL is not None else None,
        )


def _unstartable(command: str, env: dict[str, str]) -> OSError | None:
    """What exec would raise for `command` (looked up on the task's PATH): not found, or not
    executable; None when it can be started."""
    if os.sep not in command:
        found = shutil.which(command, path=env.get("PATH", os.defpath))
        return None if found else FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)
    if not os.path.exists(command):
        return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)
    if os.path.isdir(command) or not os.access(command, os.X_OK):
        return PermissionError(errno.EACCES, os.strerror(errno.EACCES), command)
    return None


class ExitWatch:
    """Waits up to a tick for the command to end, woken at its end where the OS gives a pidfd
    (Linux 5.3+; else it sleeps the tick), without reaping it (see exited)."""

    def __init__(self, pid: int) -> None:
        self.ended: select.poll | None = None  # poll, not select: a busy worker's descriptors pass 1023
        try:
            self.fd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.fd = None
        else:
            self.ended = select.poll()
            self.ended.register(self.fd, select.POLLIN)

    def wait(self, timeout: float) -> None:
        if self.ended is None:
            time.sleep(timeout)
        else:
            self.ended.poll(timeout * 1000)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def exited(proc: subprocess.Popen) -> bool:
    """Whether the command has ended, without reaping it where the OS allows: an unreaped
    leader keeps its process group's ID reserved until the group has been cleaned up."""
    if hasattr(os, "waitid"):
        try:
            return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True
    return proc.poll() is not None


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the process group; False if the group is gone."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def group_alive(pgid: int) -> bool:
    return signal_group(pgid, 0)


def kill_orphans(pgid: int, markers: list[str]) -> int:
    """SIGKILL what is left of a previous worker's task: members of process group `pgid` whose
    environment still carries every one of `markers` (e.g. FENCELINE_TI_ID=…), so that a
    recycled group ID never hits a stranger. Linux only (reads /proc); answers how many."""
    killed = 0
    needles = [b"\0" + m.encode() + b"\0" for m in markers]
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            environ = b"\0" + (entry / "environ").read_bytes() + b"\0"
            if not all(n in environ for n in needles):
                continue
            os.kill(int(entry.name), signal.SIGKILL)
            killed += 1
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
    return killed
