"""Driving fenceline through its API as the tests' three actors do, and reading its refusals.

- `Operator`: an HTTP client (a TestClient, or an httpx client of a live server) with the
  operator's bearer token; raw requests (`get`, `post`, ...) and checked steps (`create_run`,
  `run`, `ti`, `attempts`, `log`, `reap`, `admit`, ...) that assert their status.
- `Worker`: an execution the operator admitted, claiming work with its worker token.
- `Attempt`: one claimed WorkItem, acting as the agent that runs it with its attempt token.
- `assert_problem` / `assert_stale`: the one strict check of a problem+json refusal.
"""

import uuid
from typing import Any

import httpx

ADMIN_PASSWORD = "test-admin-password"

Client = httpx.Client  # a TestClient is one too (bench/ uses this module without importing it)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def json_of(resp: httpx.Response, status: int = 200) -> Any:
    """The JSON body of a response that must have `status`."""
    assert resp.status_code == status, resp.text
    return resp.json()


def assert_problem(resp: httpx.Response, status: int, type: str) -> dict[str, Any]:
    """A problem+json refusal of `status` and `type`, complete; answers the problem document."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    body = resp.json()
    assert (body["status"], body["type"]) == (status, type)
    assert body["title"] and body["detail"]
    return body


def assert_stale(resp: httpx.Response) -> dict[str, Any]:
    """409 stale-report telling the agent to terminate."""
    problem = assert_problem(resp, 409, "stale-report")
    assert problem["should_terminate"] is True
    return problem


def task(task_id: str, *upstream: str, **fields: Any) -> dict[str, Any]:
    """A task of POST /v1/runs; re-tries are claimable at once (retry_delay 0)."""
    return {"task_id": task_id, "payload": {"command": ["true"]}, "upstream": list(upstream), "retry_delay": 0,
            **fields}


def ti_ids(run: dict[str, Any]) -> dict[str, str]:
    """task_id -> ti_id of a run document."""
    return {ti["task_id"]: ti["ti_id"] for ti in run["task_instances"]}


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


class Operator:
    """The operator's side of a test: `client` with the operator's bearer token (logged in as
    admin, with `password`, unless a token is given). Runs default to dag `dag`, run `run`."""

    def __init__(self, client: Client, token: str | None = None, *, password: str = ADMIN_PASSWORD) -> None:
        if token is None:
            resp = client.post("/auth/token", json={"username": "admin", "password": password})
            token = json_of(resp, 201)["access_token"]
        self.client, self.token, self.headers = client, token, bearer(token)

    def on(self, client: Client) -> "Operator":
        """The same operator on another client (say, a race's own connection)."""
        return Operator(client, self.token)

    def request(self, method: str, path: str, *, headers: dict[str, str] | None = None,
                **kwargs: Any) -> httpx.Response:
        """A request as the operator; `headers` are added to the operator's."""
        return self.client.request(method, path, headers={**self.headers, **(headers or {})}, **kwargs)

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("PUT", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("PATCH", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", path, **kwargs)

    def create_run(self, *tasks: dict[str, Any], dag_id: str = "dag", run_id: str = "run") -> dict[str, Any]:
        """POST /v1/runs (201) of `tasks`, or of one task `t`; answers the run document."""
        body = {"dag_id": dag_id, "run_id": run_id, "tasks": list(tasks) or [task("t")]}
        return json_of(self.post("/v1/runs", json=body), 201)

    def run(self, dag_id: str = "dag", run_id: str = "run") -> dict[str, Any]:
        return json_of(self.get(f"/v1/runs/{dag_id}/{run_id}"))

    def find_ti(self, task_id: str, dag_id: str = "dag", run_id: str = "run") -> dict[str, Any]:
        """The task instance `task_id` as its run document lists it."""
        return next(ti for ti in self.run(dag_id, run_id)["task_instances"] if ti["task_id"] == task_id)

    def ti(self, ti_id: str) -> dict[str, Any]:
        return json_of(self.get(f"/v1/task-instances/{ti_id}"))

    def attempts(self, ti_id: str) -> list[dict[str, Any]]:
        return json_of(self.get(f"/v1/task-instances/{ti_id}/attempts"))["items"]

    def log(self, ti_id: str, try_number: int = 1) -> str:
        """A try's log as text, every epoch behind its system line."""
        resp = self.get(f"/v1/task-instances/{ti_id}/tries/{try_number}/log")
        assert resp.status_code == 200, resp.text
        return resp.text

    def reap(self) -> dict[str, int]:
        """One sweep; answers what it marked, by reason."""
        return json_of(self.post("/v1/admin/reap"))["marked"]

    def admission(self, seat: str = "etl-worker-1", previous: str | None = None, **body: Any) -> httpx.Response:
        """POST /v1/seats/{seat}/executions of admission_body(previous, **body)."""
        return self.post(f"/v1/seats/{seat}/executions", json=admission_body(previous, **body))

    def admit(self, seat: str = "etl-worker-1", previous: str | None = None, **body: Any) -> dict[str, Any]:
        """An admitted execution (201), with its worker token."""
        return json_of(self.admission(seat, previous, **body), 201)

    def execution_of(self, seat: str) -> str:
        """The seat's current execution."""
        return json_of(self.get(f"/v1/seats/{seat}"))["execution_id"]

    def launcher_token(self) -> str:
        return json_of(self.post("/v1/auth/launcher-tokens"), 201)["launcher_token"]


class Attempt:
    """One claimed WorkItem, acting as the agent that runs it."""

    def __init__(self, client: Client, item: dict[str, Any]) -> None:
        self.client, self.item = client, item
        self.token: str = item["attempt_token"]
        self.headers = bearer(self.token)
        self.ti_id: str = item["correlation"]["ti_id"]
        self.task_id: str = item["correlation"]["task_id"]
        self.try_number: int = item["correlation"]["try_number"]
        self.epoch: int = item["correlation"]["attempt_epoch"]

    def on(self, client: Client) -> "Attempt":
        """The same attempt's agent on another client."""
        return Attempt(client, self.item)

    def send(self, state: str, **body: Any) -> httpx.Response:
        return self.client.post("/v1/attempts/report", json={"state": state, **body}, headers=self.headers)

    def report(self, state: str, **body: Any) -> dict[str, Any]:
        return json_of(self.send(state, **body))

    def send_log(self, offset: int, content: str) -> httpx.Response:
        return self.client.post("/v1/attempts/logs", json={"offset": offset, "content": content}, headers=self.headers)

    def append_log(self, offset: int, content: str) -> dict[str, Any]:
        return json_of(self.send_log(offset, content))

    def heartbeat(self) -> httpx.Response:
        return self.client.post("/v1/attempts/heartbeat", headers=self.headers)

    def live(self) -> httpx.Response:
        return self.client.get("/v1/attempts/live", headers=self.headers)

    def release(self) -> httpx.Response:
        return self.client.post("/v1/attempts/release", headers=self.headers)

    def renew(self) -> httpx.Response:
        return self.client.post("/v1/auth/renew", headers=self.headers)


class Worker:
    """An execution the operator admitted, claiming work with its worker token."""

    def __init__(self, operator: Operator, seat: str = "worker-1", previous: str | None = None) -> None:
        self.operator, self.client, self.seat = operator, operator.client, seat
        admitted = operator.admit(seat, previous)
        self.execution_id: str = admitted["execution_id"]
        self.headers = bearer(admitted["worker_token"])

    def replacement(self) -> "Worker":
        """The seat's next execution, admitted as this one's successor (which supersedes it)."""
        return Worker(self.operator, self.seat, previous=self.execution_id)

    def claim_response(self, limit: int = 10, queues: list[str] | None = None) -> httpx.Response:
        body = {"limit": limit} if queues is None else {"limit": limit, "queues": queues}
        return self.client.post("/v1/dispatch/claim", json=body, headers=self.headers)

    def claim(self, limit: int = 10, queues: list[str] | None = None) -> list[Attempt]:
        return [Attempt(self.client, item) for item in json_of(self.claim_response(limit, queues))["items"]]

    def claim_one(self) -> Attempt:
        (attempt,) = self.claim(1)
        return attempt


def superseded(operator: Operator) -> tuple[Attempt, Attempt]:
    """An attempt whose worker was lost (re-placed by the reaper) and its replacement on a new
    worker, running. Answers (old attempt, replacement)."""
    operator.create_run(task("a"))
    old_worker = Worker(operator)
    old = old_worker.claim_one()
    old.report("running")
    new_worker = old_worker.replacement()
    assert operator.reap() == {"worker_lost": 1}
    new = new_worker.claim_one()
    new.report("running")
    assert (old.epoch, new.epoch) == (1, 3)
    return old, new
