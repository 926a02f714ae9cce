"""An emulated Kubernetes API on a loopback port, and a test kubelet that runs its Pods.

kmock's KubernetesEmulator serves objects over real HTTP, the way the API server does, to the
same client library a deployment uses (through a kubeconfig that points at it). What the
launcher relies on and the emulator lacks is added here, as a cluster does it: a
server-assigned `uid`, `resourceVersion` and `creationTimestamp`; label selectors on lists;
a delete's UID precondition, answered 409 Conflict; status updates (the `status`
subresource); and the Pod log (`pods/{name}/log`, with `follow` and `timestamps`).

The kubelet moves Pods through their phases over the same API (PATCH of the status
subresource). It runs a Pod's container as a small script in the container's args:
`echo:TEXT` prints a line, `wait:GATE` waits until the test opens that gate, `exit:N` ends
with status N, `oom` is OOM-killed, `message:TEXT` sets the termination message, and
`epoch:N:STEP` runs STEP in the attempt of epoch N only. The image
`fenceline.test/never-pulls` never pulls.

Deletion is as a cluster does it: a Pod bound to a node and deleted with a grace period (the
default is 30 s) is only marked (`deletionTimestamp`) and stays listed until its kubelet has
stopped its container and confirms it; a force delete (grace period 0), or the delete of a Pod
no node took, removes it at once. A Pod on a partitioned node (`Kubelet.partition`) keeps
running and stays listed until the partition heals. The cluster keeps the history of its Pods
(created, deleted, gone) and the kubelet the time each container ran, so a test can tell whether two
ever ran at once.
"""

import asyncio
import itertools
import threading
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import httpx
import kmock
import yaml

PODS = kmock.resource("", "v1", "pods")
# What keeps a deleted Pod listed until its kubelet confirms that its containers stopped.
KUBELET_CONFIRMS = "fenceline.test/kubelet-confirms-stop"
NAMESPACE = "tasks"
NEVER_PULLS = "fenceline.test/never-pulls"
IMAGE = "fenceline.test/script"
QUEUE = "kubernetes"


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@attrs.define(kw_only=True)
class Cluster(kmock.KubernetesEmulator):
    """The emulator, with what a cluster does that the launcher relies on."""

    pod_logs: dict[tuple[str, str], list[str]] = attrs.field(factory=lambda: defaultdict(list))
    versions: Any = attrs.field(factory=lambda: itertools.count(1))
    changed: asyncio.Event | None = None
    closing: bool = False
    # (monotonic, what, Pod name): created, deleted (a delete asked for), gone (no longer listed)
    history: list[tuple[float, str, str]] = attrs.field(factory=list)

    def _pod(self, namespace: str | None, name: str | None) -> dict[str, Any] | None:
        key = (PODS, namespace, name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        return self.objects[key].raw

    def _ping(self) -> None:
        if self.changed is not None:
            self.changed.set()
            self.changed = asyncio.Event()

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        if request.resource == PODS:
            if request.action == kmock.action.CREATE:
                meta = request.data.setdefault("metadata", {})
                meta.update(namespace=request.namespace, uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(),
                            resourceVersion=str(next(self.versions)))
                request.data["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
                self.history.append((time.monotonic(), "created", meta.get("name")))
            elif request.action == kmock.action.DELETE and request.name:
                want = ((request.data or {}).get("preconditions") or {}).get("uid")
                pod = self._pod(request.namespace, request.name)
                if want and pod is not None and pod["metadata"]["uid"] != want:
                    raise kmock.KubernetesError(status=409, reason="Conflict", message=(
                        f"Precondition failed: UID in precondition: {want}, UID in object meta: "
                        f"{pod['metadata']['uid']}"))
                if pod is not None:
                    self.history.append((time.monotonic(), "deleted", request.name))
                    self._deleting(request, pod)
            elif request.action == kmock.action.LIST:
                return self._list(request)
            elif request.action == kmock.action.FETCH and request.subresource == "log":
                return await self._log(request)
            elif request.action == kmock.action.UPDATE and isinstance(request.data, dict):
                request.data.setdefault("metadata", {})["resourceVersion"] = str(next(self.versions))
            name = request.name or ((request.data or {}).get("metadata") or {}).get("name")
            existed = self._pod(request.namespace, name) is not None
            try:
                return await super()._handle(request)
            finally:
                if existed and self._pod(request.namespace, name) is None:
                    self.history.append((time.monotonic(), "gone", name))
                self._ping()
        return await super()._handle(request)

    def _deleting(self, request: kmock.Request, pod: dict[str, Any]) -> None:
        """A graceful delete of a Pod on a node marks it, to be removed once its kubelet
        confirms; a force delete removes it now, marked or not."""
        grace = (request.data or {}).get("gracePeriodSeconds")
        grace = 30 if grace is None else int(grace)
        obj = self.objects[(PODS, request.namespace, request.name)]
        if grace > 0 and (pod.get("spec") or {}).get("nodeName"):
            if not pod["metadata"].get("deletionTimestamp"):  # kmock marks it, for the finalizer
                obj.patch({"metadata": {"finalizers": [KUBELET_CONFIRMS], "deletionGracePeriodSeconds": grace}})
        elif pod["metadata"].get("finalizers"):
            obj.patch({"metadata": {"finalizers": None}})

    def _list(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        selector = [term.split("=", 1) for term in (request.params.get("labelSelector") or "").split(",") if term]
        items = [obj.raw for (res, ns, _), obj in self.objects.items()
                 if res == PODS and not obj.deleted and (request.namespace is None or ns == request.namespace)
                 and all((obj.raw["metadata"].get("labels") or {}).get(k) == v for k, v in selector)]
        return aiohttp.web.json_response({"apiVersion": "v1", "kind": "PodList", "items": items,
                                          "metadata": {"resourceVersion": str(next(self.versions))}})

    async def _log(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        key = (request.namespace, request.name)
        pod = self._pod(*key)
        if pod is None:
            raise kmock.KubernetesNotFoundError(reason="NotFound", message=f'pods "{request.name}" not found')
        if not self._container_began(pod):
            raise kmock.KubernetesError(status=400, reason="BadRequest", message=(
                f'container "task" in pod "{request.name}" is waiting to start: ContainerCreating'))
        stamps = request.params.get("timestamps") == "true"
        resp = aiohttp.web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request._raw_request)
        sent = 0
        while True:
            lines = self.pod_logs[key]
            for line in lines[sent:]:
                await resp.write((line if stamps else line.split(" ", 1)[1]).encode() + b"\n")
            sent = len(lines)
            pod = self._pod(*key)
            if request.params.get("follow") != "true" or pod is None or self._container_ended(pod):
                if sent == len(self.pod_logs[key]):
                    break
                continue
            transport = request._raw_request.transport
            if self.closing or transport is None or transport.is_closing():
                return resp  # the client went away, or the cluster stops
            try:
                await asyncio.wait_for(self.changed.wait(), 0.2)
            except TimeoutError:
                pass
        await resp.write_eof()
        return resp

    @staticmethod
    def _container_began(pod: dict[str, Any]) -> bool:
        statuses = pod.get("status", {}).get("containerStatuses") or [{}]
        return any(k in statuses[0].get("state", {}) for k in ("running", "terminated"))

    @staticmethod
    def _container_ended(pod: dict[str, Any]) -> bool:
        statuses = pod.get("status", {}).get("containerStatuses") or [{}]
        return "terminated" in statuses[0].get("state", {})

    def write_log(self, namespace: str, name: str, text: str) -> None:
        self.pod_logs[(namespace, name)].append(f"{now_rfc3339()} {text}")
        self._ping()


class RunningCluster:
    """The emulator served on a loopback port from a thread of its own (the launcher and
    the tests call it synchronously, over HTTP)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.ready = tmp, threading.Event()
        self.cluster: Cluster | None = None
        self.url = ""
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    async def _start(self) -> None:
        self.cluster = Cluster()
        self.cluster.changed = asyncio.Event()
        await self.cluster.__aenter__()
        self.server = kmock.Server(self.cluster)
        await self.server.__aenter__()
        self.url = str(self.server.url).rstrip("/")

    async def _stop(self) -> None:
        self.cluster.closing = True
        await self.server.__aexit__(None, None, None)
        await self.cluster.__aexit__(None, None, None)

    def __enter__(self) -> "RunningCluster":
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(20)
        self.kubeconfig = self.tmp / "kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "launcher", "user": {"token": "emulated"}}],
            "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "launcher",
                                                           "namespace": NAMESPACE}}],
        }))
        self.http = httpx.Client(base_url=self.url, timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(20)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def in_loop(self, fn: Any, *args: Any) -> Any:
        async def call() -> Any:
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(10)

    # what the tests and the kubelet do over the API ----------------------------------------

    def pods(self, selector: str = "") -> list[dict[str, Any]]:
        resp = self.http.get(f"/api/v1/namespaces/{NAMESPACE}/pods", params={"labelSelector": selector})
        resp.raise_for_status()
        return resp.json()["items"]

    def pod(self, name: str) -> dict[str, Any] | None:
        resp = self.http.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
        return resp.json() if resp.status_code == 200 else None

    def create(self, pod: dict[str, Any]) -> dict[str, Any]:
        resp = self.http.post(f"/api/v1/namespaces/{NAMESPACE}/pods", json=pod)
        resp.raise_for_status()
        return resp.json()

    def patch(self, name: str, changes: dict[str, Any], subresource: str = "") -> bool:
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{name}" + (f"/{subresource}" if subresource else "")
        resp = self.http.patch(path, json=changes, headers={"Content-Type": "application/merge-patch+json"})
        return resp.status_code == 200

    def delete(self, name: str) -> bool:
        return self.http.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}").status_code == 200

    def write_log(self, name: str, text: str) -> None:
        self.in_loop(self.cluster.write_log, NAMESPACE, name, text)

    def history(self) -> list[tuple[float, str, str]]:
        return self.in_loop(lambda: list(self.cluster.history))

    def deletes(self) -> list[str]:
        """The names of the Pods a DELETE was sent for, in order (what the launcher asked)."""
        return [r.name for r in list(self.cluster) if r.action == kmock.action.DELETE and r.resource == PODS]


def container(state: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"containerStatuses": [{"name": "task", "image": IMAGE, "ready": "running" in state, "restartCount": 0,
                                   "state": state, **extra}]}


class Kubelet:
    """Runs the Pods of the emulated cluster: schedules them, pulls (or never pulls) their
    image, runs their script, and reports each step through the status subresource."""

    def __init__(self, cluster: RunningCluster, tick: float = 0.02) -> None:
        self.cluster, self.tick = cluster, tick
        self.gates: dict[str, threading.Event] = defaultdict(threading.Event)
        self.running: dict[str, threading.Thread] = {}  # by Pod uid
        self.ran: dict[str, list[float | None]] = {}  # by Pod name: [start, end] of its container, monotonic
        self.partitioned: set[str] = set()  # names of Pods on a node cut off from the API server
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.http = httpx.Client(base_url=cluster.url, timeout=10)

    def __enter__(self) -> "Kubelet":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for gate in self.gates.values():
            gate.set()
        self.thread.join(10)

    def open(self, gate: str) -> None:
        self.gates[gate].set()

    def partition(self, *names: str) -> None:
        """The nodes of these Pods lose the API server: their containers run on, and a
        deletion of them is not confirmed, until `heal`."""
        self.partitioned.update(names)

    def heal(self) -> None:
        self.partitioned.clear()

    def _loop(self) -> None:
        while not self.stop.wait(self.tick):
            try:
                pods = self.cluster.pods()
            except httpx.HTTPError:
                continue
            for pod in pods:
                uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
                if pod["metadata"].get("deletionTimestamp"):
                    thread = self.running.get(uid)
                    if name not in self.partitioned and (thread is None or not thread.is_alive()):
                        self._confirm_stopped(pod)
                elif uid not in self.running and pod["status"].get("phase") == "Pending" \
                        and not pod["status"].get("containerStatuses"):
                    self.running[uid] = threading.Thread(target=self._run, args=(pod,), daemon=True)
                    self.running[uid].start()

    def _confirm_stopped(self, pod: dict[str, Any]) -> None:
        """A deleted Pod: its container killed if it still ran (the grace period is not
        waited out here), then its removal confirmed."""
        name, status = pod["metadata"]["name"], pod.get("status") or {}
        state = ((status.get("containerStatuses") or [{}])[0]).get("state") or {}
        if "running" in state:
            self.terminate(name, 137, "Error", started=state["running"].get("startedAt"))
        if (ran := self.ran.get(name)) and ran[1] is None:
            ran[1] = time.monotonic()
        self.cluster.patch(name, {"metadata": {"finalizers": None}})

    def _stopping(self, name: str) -> bool:
        """The container is to stop: the kubelet stops, or the Pod was deleted (unless its node
        cannot hear of it)."""
        if self.stop.is_set():
            return True
        pod = self.cluster.pod(name)
        return pod is None or (bool(pod["metadata"].get("deletionTimestamp")) and name not in self.partitioned)

    def _status(self, name: str, status: dict[str, Any]) -> bool:
        return self.cluster.patch(name, {"status": status}, "status")

    def _run(self, pod: dict[str, Any]) -> None:
        name, spec = pod["metadata"]["name"], pod["spec"]["containers"][0]
        scheduled = {"conditions": [{"type": "PodScheduled", "status": "True"}]}
        self.cluster.patch(name, {"spec": {"nodeName": "node-1"}})
        if spec["image"] == NEVER_PULLS:
            self._status(name, {**scheduled, **container({"waiting": {"reason": "ErrImagePull",
                                                                       "message": "pull access denied"}})})
            return
        if not self._status(name, {**scheduled, **container({"waiting": {"reason": "ContainerCreating"}})}):
            return
        started = now_rfc3339()
        if not self._status(name, {"phase": "Running", "startTime": started,
                                   **container({"running": {"startedAt": started}})}):
            return
        self.ran[name] = [time.monotonic(), None]
        code, reason, message = 0, "Completed", None
        env = {e["name"]: e.get("value") for e in spec.get("env") or []}
        for step in spec.get("args") or []:
            verb, _, arg = step.partition(":")
            if verb == "epoch":  # epoch:N:STEP runs STEP in the attempt of epoch N only
                wanted, _, step = arg.partition(":")
                if env.get("FENCELINE_ATTEMPT_EPOCH") != wanted:
                    continue
                verb, _, arg = step.partition(":")
            if verb == "echo":
                self.cluster.write_log(name, arg)
            elif verb == "wait":
                while not self.gates[arg].wait(0.05):
                    if self._stopping(name):
                        return  # deleted while it ran: the loop stops its container
            elif verb == "message":
                message = arg
            elif verb == "exit":
                code, reason = int(arg), "Completed" if arg == "0" else "Error"
                break
            elif verb == "oom":
                code, reason = 137, "OOMKilled"
                break
        if self.cluster.pod(name) is None:
            return
        self.terminate(name, code, reason, message, started)

    def terminate(self, name: str, code: int, reason: str, message: str | None = None,
                  started: str | None = None, pod_status: dict[str, Any] | None = None) -> None:
        """The container ends with `code` and `reason`; `pod_status` adds to the Pod's status."""
        end = {"exitCode": code, "reason": reason, "startedAt": started or now_rfc3339(), "finishedAt": now_rfc3339(),
               **({"message": message} if message else {})}
        if (ran := self.ran.get(name)) and ran[1] is None:
            ran[1] = time.monotonic()
        phase = "Succeeded" if code == 0 else "Failed"
        self._status(name, {"phase": phase, **container({"terminated": end}), **(pod_status or {})})

    # what happens to Pods from outside -------------------------------------------------------

    def evict(self, name: str) -> None:
        """The kubelet's eviction under node pressure: the Pod fails, reason Evicted."""
        self.terminate(name, 137, "Error", pod_status={
            "phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory.",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}]})


def image_task(task_id: str, *script: str, **fields: Any) -> dict[str, Any]:
    """A task of the kubernetes queue whose Pod runs `script` in the test kubelet."""
    return {"task_id": task_id, "payload": {"image": IMAGE, "args": list(script)}, "queue": QUEUE,
            "retry_delay": 0, **fields}
