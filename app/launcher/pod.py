"""The Pod of one attempt, and the attempt a Pod names (contract 9.2, 9.3).

The labels are the attempt's identity, written by the launcher from the claim's correlation
bag; the task inside the Pod holds no credential that could change them. Label values are
made label-safe (at most 63 characters of [A-Za-z0-9-_.], a hash suffix where anything had to
change), so the exact values ride along in annotations. A Pod without an attempt-epoch label
(made before epochs existed) is epoch 0: it never matches an attempt claimed since, which are
all epoch 1 or more.
"""

import hashlib
import re
from collections.abc import Iterable
from typing import Any

from app.telemetry.traceparent import run_traceparent
from app.worker.process import task_env

PREFIX = "fenceline.io/"
LAUNCHER = PREFIX + "launcher"
CONTAINER = "task"
# The correlation fields the labels carry, by label name.
LABELS = {"dag-id": "dag_id", "task-id": "task_id", "run-id": "run_id", "map-index": "map_index",
          "try-number": "try_number", "attempt-epoch": "attempt_epoch", "tenant-id": "tenant_id"}
# The selector of one try on the API server (teardown): the epoch is filtered in code, because
# a Pod with no epoch label is epoch 0 and a selector cannot say "absent or 0".
TRY_SELECTOR = ("dag-id", "run-id", "task-id", "map-index", "try-number")
# The selector of a task instance's Pods, every try and epoch, whichever launcher made them.
TI_SELECTOR = ("dag-id", "run-id", "task-id", "map-index")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
LABEL_MAX = 63


def label_safe(value: Any) -> str:
    """A label value standing for `value`: the same when it is one already, else a readable
    part of it and a hash of the whole, so two different values never share a label."""
    text = "" if value is None else str(value)
    safe = _UNSAFE.sub("-", text).strip("-_.")
    if safe == text and len(text) <= LABEL_MAX:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{safe[:LABEL_MAX - 11].rstrip('-_.')}-{digest}".lstrip("-")


def pod_name(correlation: dict[str, Any]) -> str:
    """Unique per attempt (task instance, try, epoch), a valid DNS label."""
    task = re.sub(r"[^a-z0-9-]+", "-", str(correlation["task_id"]).lower()).strip("-")[:30].rstrip("-")
    ti = hashlib.sha256(str(correlation["ti_id"]).encode()).hexdigest()[:10]
    return f"fl-{task + '-' if task else ''}{ti}-t{correlation['try_number']}-e{correlation['attempt_epoch']}"


def attempt_labels(correlation: dict[str, Any], fields: Iterable[str] = LABELS) -> dict[str, str]:
    return {PREFIX + label: label_safe(correlation.get(LABELS[label])) for label in fields
            if correlation.get(LABELS[label]) is not None}


def _selector(correlation: dict[str, Any], fields: Any) -> str:
    return ",".join(f"{k}={v}" for k, v in attempt_labels(correlation, fields).items())


def try_selector(correlation: dict[str, Any]) -> str:
    """The server-side selector of every Pod of the attempt's try, whatever its epoch."""
    return _selector(correlation, TRY_SELECTOR)


def ti_selector(correlation: dict[str, Any]) -> str:
    """The server-side selector of every Pod of the attempt's task instance."""
    return _selector(correlation, TI_SELECTOR)


def epoch_of(pod: dict[str, Any]) -> int:
    """The Pod's attempt epoch: its label, and 0 when the label is absent (or unreadable)."""
    value = labels_of(pod).get(PREFIX + "attempt-epoch")
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return -1  # matches no attempt


def labels_of(pod: dict[str, Any]) -> dict[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def is_attempt_pod(pod: dict[str, Any], correlation: dict[str, Any]) -> bool:
    """The label fence: the Pod is this very attempt's, try and epoch, read off its labels
    (and its task instance's annotation, where it has one)."""
    labels = labels_of(pod)
    wanted = attempt_labels(correlation, TRY_SELECTOR)
    if any(labels.get(k) != v for k, v in wanted.items()):
        return False
    ti = ((pod.get("metadata") or {}).get("annotations") or {}).get(PREFIX + "ti-id")
    return (ti is None or ti == str(correlation["ti_id"])) and epoch_of(pod) == int(correlation["attempt_epoch"])


def superseded_by(pod: dict[str, Any], correlation: dict[str, Any]) -> bool:
    """The Pod is of an earlier attempt of the task instance than `correlation`'s: an earlier
    try, or an earlier epoch of the same try (no epoch label is epoch 0)."""
    labels = labels_of(pod)
    if any(labels.get(k) != v for k, v in attempt_labels(correlation, TI_SELECTOR).items()):
        return False
    ti = ((pod.get("metadata") or {}).get("annotations") or {}).get(PREFIX + "ti-id")
    if ti is not None and ti != str(correlation["ti_id"]):
        return False
    try:
        try_number = int(labels[PREFIX + "try-number"])
    except (KeyError, ValueError):
        return False  # names no try: not an attempt's Pod this launcher can place
    return (try_number, epoch_of(pod)) < (int(correlation["try_number"]), int(correlation["attempt_epoch"]))


def manifest(item: dict[str, Any], *, namespace: str, launcher: str, service_account: str | None = None,
             traceparent: str | None = None) -> dict[str, Any]:
    """The Pod a WorkItem (as the claim returns it) runs as: the one function that builds both
    the Pods the launcher creates and what `fenceline launcher pod-spec` prints. No credential
    goes inside: the launcher keeps the attempt token, and no service-account token is mounted.
    TRACEPARENT is the attempt's span when the launcher traces (its span id is drawn then),
    else the run's root, which is all a Pod printed ahead can name."""
    payload, correlation = item["payload"], item["correlation"]
    annotations = {PREFIX + label: str(correlation[field]) for label, field in LABELS.items()
                   if correlation.get(field) is not None}
    annotations[PREFIX + "ti-id"] = str(correlation["ti_id"])
    annotations[PREFIX + "fencing-token"] = str(correlation["attempt_epoch"])  # contract 11.1, as the env says
    env = task_env(payload, correlation, {}, traceparent or run_traceparent(correlation))
    container: dict[str, Any] = {
        "name": CONTAINER, "image": payload["image"], "args": list(payload.get("args") or []),
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
    }
    if payload.get("command"):
        container["command"] = list(payload["command"])
    if resources := container_resources(payload.get("resources") or {}):
        container["resources"] = resources
    spec: dict[str, Any] = {"restartPolicy": "Never", "automountServiceAccountToken": False,
                            "enableServiceLinks": False, "containers": [container]}
    if service_account:
        spec["serviceAccountName"] = service_account
    if payload.get("timeout_seconds"):
        # Kubernetes stops the Pod (phase Failed, reason DeadlineExceeded): deadline_exceeded.
        spec["activeDeadlineSeconds"] = max(1, int(-(-payload["timeout_seconds"] // 1)))
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name(correlation), "namespace": namespace,
                     "labels": {**attempt_labels(correlation), LAUNCHER: label_safe(launcher),
                                "app.kubernetes.io/managed-by": "fenceline-launcher"},
                     "annotations": annotations},
        "spec": spec,
    }


def container_resources(resources: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """cpu and memory are requested; memory is also the limit (the OOM killer's line, so an
    overrun is oom_killed, not a node-wide eviction); gpus are limits, as the device plugins
    require."""
    requests = {k: resources[k] for k in ("cpu", "memory") if resources.get(k)}
    limits: dict[str, Any] = {"memory": resources["memory"]} if resources.get("memory") else {}
    if resources.get("gpu"):
        limits["nvidia.com/gpu"] = str(resources["gpu"])  # a quantity is a string
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
