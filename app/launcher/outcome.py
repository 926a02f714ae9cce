"""What a Pod's status says about its attempt (contract 9.1): read off the container's
termination (exit code, reason, message) and the Pod's conditions, never off its phase alone.

Every function here takes the Pod as the API server serves it (a JSON object, camelCase).
"""

import json
from datetime import datetime
from typing import Any

from app.launcher.pod import CONTAINER
from app.telemetry.reasons import INFRA_REASONS  # the ones a termination message may name
from app.worker.process import ReportedOutcome

# Waiting reasons the kubelet will not get past by trying again: the Pod never starts.
NEVER_STARTS = ("InvalidImageName", "ErrImageNeverPull")
# DisruptionTarget reasons that mean the node went away, not that the Pod was pushed off it.
NODE_GONE = ("DeletionByTaintManager", "DeletionByPodGC")
# Pod-level reasons of a Pod the node lost or shut down under it.
NODE_LOST_REASONS = ("NodeLost", "Shutdown", "Terminated", "NodeShutdown", "UnexpectedAdmissionError")


def container_status(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((c for c in statuses if c.get("name") == CONTAINER), {})


def terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    return (container_status(pod).get("state") or {}).get("terminated")


def stopped(pod: dict[str, Any]) -> bool:
    """No user code runs in the Pod any more, nor ever will: its container terminated (its
    restart policy is Never), or the Pod ended."""
    return terminated(pod) is not None or (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")


def started(pod: dict[str, Any]) -> bool:
    """The task's container has started (user code ran), whether it still runs or not."""
    state = container_status(pod).get("state") or {}
    if "running" in state:
        return True
    end = state.get("terminated")
    return bool(end and (end.get("startedAt") or end.get("exitCode") is not None))


def waiting(pod: dict[str, Any]) -> tuple[str, str] | None:
    """Why the container has not started: (reason, message), or None."""
    wait = (container_status(pod).get("state") or {}).get("waiting")
    if wait:
        return wait.get("reason") or "Waiting", wait.get("message") or ""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return cond.get("reason") or "Unschedulable", cond.get("message") or ""
    return None


def disruption(pod: dict[str, Any]) -> str | None:
    """The DisruptionTarget condition's reason, when Kubernetes is taking the Pod away."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return cond.get("reason") or "DisruptionTarget"
    return None


def _infra_cause(pod: dict[str, Any], deleted_by_launcher: bool) -> ReportedOutcome | None:
    """An infrastructure cause of the Pod's end, if the Pod shows one."""
    status = pod.get("status") or {}
    reason = status.get("reason") or ""
    if (why := disruption(pod)) is not None:
        if why in NODE_GONE:
            return ReportedOutcome("unexecutable", "node_lost", f"the Pod was removed with its node ({why})")
        return ReportedOutcome("unexecutable", "evicted", f"the Pod was disrupted ({why})")
    if reason in ("Evicted", "Preempting"):
        return ReportedOutcome("unexecutable", "evicted", f"the Pod was evicted: {status.get('message') or reason}")
    if reason == "DeadlineExceeded":
        return ReportedOutcome("unexecutable", "deadline_exceeded",
                               "the Pod ran past timeout_seconds (activeDeadlineSeconds)")
    if reason in NODE_LOST_REASONS:
        return ReportedOutcome("unexecutable", "node_lost", f"the Pod's node was lost ({reason})")
    if (pod.get("metadata") or {}).get("deletionTimestamp") and not deleted_by_launcher:
        return ReportedOutcome("unexecutable", "node_lost", "the Pod was deleted by someone other than the launcher")
    return None


def from_message(message: str | None) -> ReportedOutcome | None:
    """The outcome the task recorded as JSON in its termination message, when the message is
    valid: an object whose `state` is `success` or `failed`, `rescheduled` with a
    `reschedule_at` (ISO 8601 with a zone), or `unexecutable` with an infrastructure `reason`;
    other members are ignored. Anything else (not JSON, cut short, another state, a field
    missing or wrong) is no record: the exit code decides."""
    try:
        said = json.loads(message or "")
    except ValueError:
        return None
    if not isinstance(said, dict):
        return None
    state = said.get("state")
    if state in ("success", "failed"):
        return ReportedOutcome(state, None, f"the termination message records {state}")
    if state == "rescheduled":
        try:
            when = datetime.fromisoformat(str(said.get("reschedule_at")))
        except ValueError:
            return None
        if when.tzinfo is None:
            return None
        return ReportedOutcome("rescheduled", None, "the termination message asks to be rescheduled", when.isoformat())
    if state == "unexecutable" and said.get("reason") in INFRA_REASONS:
        return ReportedOutcome("unexecutable", said["reason"], "the termination message names an infrastructure fault")
    return None


def outcome_of(pod: dict[str, Any], *, deleted_by_launcher: bool = False) -> ReportedOutcome | None:
    """The attempt's outcome once the Pod shows one, else None (still pending or running). A
    valid termination message is the durable record of the outcome: it wins over the exit
    code and the termination reason (a task killed after it wrote its success succeeded)."""
    end = terminated(pod)
    if end is not None:
        code = end.get("exitCode")
        if (said := from_message(end.get("message"))) is not None:
            return said
        if end.get("reason") == "OOMKilled":
            return ReportedOutcome("unexecutable", "oom_killed", f"the container was OOM-killed (exit {code})")
        if code == 0:
            return ReportedOutcome("success", None, "the container exited with status 0")
        if (infra := _infra_cause(pod, deleted_by_launcher)) is not None:
            return infra
        if end.get("reason") == "ContainerStatusUnknown":
            return ReportedOutcome("unexecutable", "node_lost", "the container's state was lost with its node")
        return ReportedOutcome("failed", None, f"the container exited with status {code}" +
                       (f" ({end['reason']})" if end.get("reason") not in (None, "Error", "Completed") else ""))
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Failed", "Succeeded"):  # the Pod ended with no container termination to read
        if (infra := _infra_cause(pod, deleted_by_launcher)) is not None:
            return infra
        status = pod.get("status") or {}
        return ReportedOutcome("unexecutable", "dispatch_failed",
                       f"the Pod ended {phase} before its container ran ({status.get('reason') or 'no reason'})")
    if (wait := waiting(pod)) is not None and wait[0] in NEVER_STARTS:
        why = f"{wait[0]} {wait[1]}".rstrip()
        return ReportedOutcome("unexecutable", "dispatch_failed", f"the container can never start: {why}")
    return None


def never_started(pod: dict[str, Any] | None, waited: float) -> ReportedOutcome:
    """The verdict on a Pod whose container did not start within its deadline."""
    wait = waiting(pod) if pod else None
    why = f"{wait[0]}: {wait[1]}".rstrip(": ") if wait else "no container status"
    return ReportedOutcome("unexecutable", "dispatch_failed", f"the Pod did not start within {waited:.0f}s ({why})")
