"""Driving task instances through the API as plain requests and dicts (the log, Airflow and
dashboard tests); tests/agents.py has the same steps as Worker and Attempt objects."""

from typing import Any

from tests.agents import bearer, task
from tests.factories import Client, admit

__all__ = ["append_log", "bearer", "claim", "claim_one", "create_run", "report", "task", "worker"]


def create_run(client: Client, operator: dict[str, str], dag_id: str = "dag", run_id: str = "run",
               tasks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    resp = client.post("/v1/runs", json={"dag_id": dag_id, "run_id": run_id, "tasks": tasks or [task("t")]},
                       headers=operator)
    assert resp.status_code == 201, resp.text
    return resp.json()


def worker(client: Client, operator: dict[str, str], seat: str = "worker-1") -> dict[str, str]:
    """A freshly admitted execution's worker auth headers."""
    return bearer(admit(client, operator, seat)["worker_token"])


def claim(client: Client, worker_headers: dict[str, str], limit: int = 1) -> list[dict[str, Any]]:
    resp = client.post("/v1/dispatch/claim", json={"limit": limit}, headers=worker_headers)
    assert resp.status_code == 200, resp.text
    return resp.json()["items"]


def claim_one(client: Client, worker_headers: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The one claimable WorkItem and its attempt token's auth headers."""
    items = claim(client, worker_headers)
    assert len(items) == 1, items
    return items[0], bearer(items[0]["attempt_token"])


def report(client: Client, attempt: dict[str, str], state: str, expect: int = 200, **fields: Any) -> dict[str, Any]:
    resp = client.post("/v1/attempts/report", json={"state": state, **fields}, headers=attempt)
    assert resp.status_code == expect, resp.text
    return resp.json()


def append_log(client: Client, attempt: dict[str, str], offset: int, content: str, expect: int = 200) -> dict[str, Any]:
    resp = client.post("/v1/attempts/logs", json={"offset": offset, "content": content}, headers=attempt)
    assert resp.status_code == expect, resp.text
    return resp.json()
