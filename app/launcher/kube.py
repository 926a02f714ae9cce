"""The launcher's only line to Kubernetes: the official client (`kubernetes`), in-cluster or
from a kubeconfig, answering Pods as the API server serves them (JSON objects, not models).

The official client was picked for the one call the label fence cannot do without, a delete
with a UID precondition (lightkube's delete takes none), for its synchronous calls (the
launcher's attempts are threads, as the worker's are), and because it is what Airflow's
KubernetesExecutor runs on.
"""

import json
import os
from collections.abc import Iterator
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from app.launcher.pod import CONTAINER

TIMEOUT = (5.0, 30.0)  # connect, read
# A followed log that stays silent this long is opened again (the follower skips what it has).
LOG_READ_TIMEOUT = 300.0
# 0 would be a force delete: the Pod leaves the API server at once, while its container may run on.
DELETE_GRACE_SECONDS = 1


class KubeUnreachable(Exception):
    """No answer from the API server, or a fault on its side: the call may be repeated."""


class KubeRefused(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


def _refusal(exc: ApiException) -> Exception:
    status = int(exc.status or 0)
    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        body = {}
    reason, message = str(body.get("reason") or exc.reason or ""), str(body.get("message") or "")
    if status == 0 or status >= 500 or status == 429:
        return KubeUnreachable(f"HTTP {status} {reason}".strip())
    return KubeRefused(status, reason, message)


def load_configuration(kubeconfig: str | None, context: str | None) -> client.Configuration:
    """In-cluster (the Pod's service account) when no kubeconfig is named and the launcher
    runs in a Pod; else the kubeconfig (KUBECONFIG or ~/.kube/config by default)."""
    configuration = client.Configuration()
    if kubeconfig is None and context is None:
        try:
            config.load_incluster_config(client_configuration=configuration)
            return configuration
        except config.ConfigException:
            pass
    config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    return configuration


class Kube:
    """Pods of one namespace."""

    def __init__(self, configuration: client.Configuration, namespace: str) -> None:
        self.namespace = namespace
        self.api_client = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.api_client)

    def close(self) -> None:
        self.api_client.close()

    def _json(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            resp = call(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
            return json.loads(resp.data or b"null")
        except ApiException as exc:
            raise _refusal(exc) from exc
        except (HTTPError, OSError) as exc:
            raise KubeUnreachable(f"{type(exc).__name__}: {exc}") from exc
        except ValueError as exc:  # the client's own check of the request (its pydantic models)
            raise KubeRefused(422, "Invalid", str(exc).splitlines()[0]) from exc

    def create(self, pod: dict[str, Any]) -> dict[str, Any]:
        return self._json(self.core.create_namespaced_pod, self.namespace, pod)

    def list(self, selector: str) -> list[dict[str, Any]]:
        return self._json(self.core.list_namespaced_pod, self.namespace, label_selector=selector)["items"]

    def delete(self, name: str, uid: str) -> bool:
        """Delete Pod `name` only if it is still the Pod `uid` (the precondition); False if it
        is gone or is another Pod now (409), which is then left alone. The grace period is the
        shortest that is not a force delete: the container is stopped at once (SIGTERM, SIGKILL
        a second later), and the Pod stays listed, with a deletionTimestamp, until its kubelet
        confirms that it stopped, so that "gone" means stopped (contract 9.5)."""
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid),
                                         grace_period_seconds=DELETE_GRACE_SECONDS)
        try:
            self._json(self.core.delete_namespaced_pod, name, self.namespace, body=options)
            return True
        except KubeRefused as exc:
            if exc.status in (404, 409):
                return False
            raise

    def follow_log(self, name: str) -> Iterator[str]:
        """The container's log lines from the start, each with its RFC 3339 timestamp, until
        the container ends (or the connection does)."""
        try:
            resp = self.core.read_namespaced_pod_log(name, self.namespace, container=CONTAINER, follow=True,
                                                     timestamps=True, _preload_content=False,
                                                     _request_timeout=(TIMEOUT[0], LOG_READ_TIMEOUT))
        except ApiException as exc:
            raise _refusal(exc) from exc
        except (HTTPError, OSError) as exc:
            raise KubeUnreachable(f"{type(exc).__name__}: {exc}") from exc
        try:
            pending = b""
            for chunk in resp.stream(64 * 1024, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", errors="replace")
            if pending:
                yield pending.decode("utf-8", errors="replace")
        except (HTTPError, OSError) as exc:
            raise KubeUnreachable(f"log stream: {type(exc).__name__}: {exc}") from exc
        finally:
            resp.release_conn()


IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def default_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's context, or in a Pod the Pod's own, else `default`."""
    if kubeconfig is None and context is None and os.path.exists(IN_CLUSTER_NAMESPACE):
        with open(IN_CLUSTER_NAMESPACE) as handle:
            return handle.read().strip() or "default"
    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
    except (config.ConfigException, OSError):
        return "default"
    chosen = next((c for c in contexts if c["name"] == context), None) if context else active
    return ((chosen or {}).get("context") or {}).get("namespace") or "default"
