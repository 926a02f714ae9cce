"""Request builders shared by the tests."""

import uuid
from typing import Any

import httpx
from fastapi.testclient import TestClient

Client = TestClient | httpx.Client


def admission_body(
    previous: str | None = None, *, swarm: str = "etl", backend: str = "local",
    target: dict[str, Any] | None = None, **extra: Any,
) -> dict[str, Any]:
    return {"swarm": swarm, "runtime_backend": backend, "runtime_target": target,
            "previous_execution_id": previous, **extra}


def kube_target(pod_uid: str | None = None) -> dict[str, Any]:
    target = {"pod_namespace": "workers", "pod_name": f"pod-{uuid.uuid4().hex[:8]}"}
    if pod_uid:
        target["pod_uid"] = pod_uid
    return target


def admit(client: Client, headers: dict[str, str], seat: str = "etl-worker-1", previous: str | None = None,
          expect: int = 201, **body: Any) -> dict[str, Any]:
    resp = client.post(f"/v1/seats/{seat}/executions", json=admission_body(previous, **body), headers=headers)
    assert resp.status_code == expect, resp.text
    return resp.json()
