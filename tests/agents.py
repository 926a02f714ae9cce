"""Driving task attempts as an operator, a worker and its agent would, through the API."""

from typing import Any

import httpx

from tests.factories import Client, admit


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def task(task_id: str, *upstream: str, **fields: Any) -> dict[str, Any]:
    """A task of POST /v1/runs; re-tries are claimable at once (retry_delay 0)."""
    return {"task_id": task_id, "payload": {"command": ["true"]}, "upstream": list(upstream), "retry_delay": 0,
            **fields}


def create_run(client: Client, operator: dict[str, str], *tasks: dict[str, Any], dag_id: str = "d",
               run_id: str = "r") -> dict[str, Any]:
    resp = client.post("/v1/runs", json={"dag_id": dag_id, "run_id": run_id, "tasks": list(tasks)}, headers=operator)
    assert resp.status_code == 201, resp.text
    return resp.json()


def ti_ids(run: dict[str, Any]) -> dict[str, str]:
    """task_id -> ti_id of a run document."""
    return {ti["task_id"]: ti["ti_id"] for ti in run["task_instances"]}


def read_ti(client: Client, operator: dict[str, str], ti_id: str) -> dict[str, Any]:
    resp = client.get(f"/v1/task-instances/{ti_id}", headers=operator)
    assert resp.status_code == 200, resp.text
    return resp.json()


def read_attempts(client: Client, operator: dict[str, str], ti_id: str) -> list[dict[str, Any]]:
    resp = client.get(f"/v1/task-instances/{ti_id}/attempts", headers=operator)
    assert resp.status_code == 200, resp.text
    return resp.json()["items"]


def read_run(client: Client, operator: dict[str, str], dag_id: str = "d", run_id: str = "r") -> dict[str, Any]:
    resp = client.get(f"/v1/runs/{dag_id}/{run_id}", headers=operator)
    assert resp.status_code == 200, resp.text
    return resp.json()


def reap(client: Client, operator: dict[str, str]) -> dict[str, int]:
    resp = client.post("/v1/admin/reap", headers=operator)
    assert resp.status_code == 200, resp.text
    return resp.json()["marked"]


def assert_problem(resp: httpx.Response, status: int, type: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert resp.json()["type"] == type
    return resp.json()


def assert_stale(resp: httpx.Response) -> dict[str, Any]:
    """409 stale-report telling the agent to terminate."""
    problem = assert_problem(resp, 409, "stale-report")
    assert problem["should_terminate"] is True
    return problem


class Attempt:
    """One claimed WorkItem, acting as the agent that runs it."""

    def __init__(self, client: Client, item: dict[str, Any]) -> None:
        self.client, self.item = client, item
        self.token: str = item["attempt_token"]
        self.ti_id: str = item["correlation"]["ti_id"]
        self.task_id: str = item["correlation"]["task_id"]
        self.try_number: int = item["correlation"]["try_number"]
        self.epoch: int = item["correlation"]["attempt_epoch"]

    def send(self, state: str, **body: Any) -> httpx.Response:
        return self.client.post("/v1/attempts/report", json={"state": state, **body}, headers=bearer(self.token))

    def report(self, state: str, **body: Any) -> dict[str, Any]:
        resp = self.send(state, **body)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def heartbeat(self) -> httpx.Response:
        return self.client.post("/v1/attempts/heartbeat", headers=bearer(self.token))

    def live(self) -> httpx.Response:
        return self.client.get("/v1/attempts/live", headers=bearer(self.token))

    def release(self) -> httpx.Response:
        return self.client.post("/v1/attempts/release", headers=bearer(self.token))

    def renew(self) -> httpx.Response:
        return self.client.post("/v1/auth/renew", headers=bearer(self.token))


class Worker:
    """An admitted execution that claims work with its worker token."""

    def __init__(self, client: Client, operator: dict[str, str], seat: str = "worker-1",
                 previous: str | None = None) -> None:
        self.client, self.operator, self.seat = client, operator, seat
        admitted = admit(client, operator, seat, previous)
        self.execution_id: str = admitted["execution_id"]
        self.headers = bearer(admitted["worker_token"])

    def replacement(self) -> "Worker":
        """The seat's next execution, admitted as this one's successor (which supersedes it)."""
        return Worker(self.client, self.operator, self.seat, previous=self.execution_id)

    def claim_response(self, limit: int = 10) -> httpx.Response:
        return self.client.post("/v1/dispatch/claim", json={"limit": limit}, headers=self.headers)

    def claim(self, limit: int = 10) -> list[Attempt]:
        resp = self.claim_response(limit)
        assert resp.status_code == 200, resp.text
        return [Attempt(self.client, item) for item in resp.json()["items"]]

    def claim_one(self) -> Attempt:
        (attempt,) = self.claim(1)
        return attempt


def superseded(client: Client, operator: dict[str, str]) -> tuple[Attempt, Attempt]:
    """An attempt whose worker was lost (re-placed by the reaper) and its replacement on a new
    worker, running. Answers (old attempt, replacement)."""
    create_run(client, operator, task("a"))
    old_worker = Worker(client, operator)
    old = old_worker.claim_one()
    old.report("running")
    new_worker = old_worker.replacement()
    assert reap(client, operator) == {"worker_lost": 1}
    new = new_worker.claim_one()
    new.report("running")
    assert (old.epoch, new.epoch) == (1, 3)
    return old, new
