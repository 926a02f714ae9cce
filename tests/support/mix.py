"""The concurrent-writers mix of contract 2.12 (issue 43 item 2), shared by
tests/execution/test_concurrent_writers.py and `python -m bench edges`.

Two workers claim and report (batches of heartbeats, `running` and outcomes, and single
reports), while an operator clears task instances, clears runs' failures, sweeps by hand and
creates runs, each actor in a thread of its own with its own HTTP connection, for a while.
Every request is resent after a 503 or a lost connection, as an agent resends it; every
status a request was answered is counted. `audit` then holds the database to the answers: every
outcome a 200 acknowledged is recorded on its attempt's record, and no record holds an
agent's outcome that no 200 acknowledged; each try ends at most once; each attempt was
claimed once.
"""

import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy import Engine, text

from tests.support.api import Operator, bearer, task

# The reasons of an agent's failures, telling its outcomes from the reaper's marks (agent_lost, …).
REASONS = {"failed": "mix", "unexecutable": "evicted"}
RESENDS = 20  # a request still refused after this many resends counts as failed
RECENT = 6  # the runs an operator clears: the last ones created, where the workers are


@dataclass
class Tally:
    """What the actors saw, shared (under `lock`) by all of them."""

    statuses: Counter = field(default_factory=Counter)  # (route, status) of every answer
    problems: Counter = field(default_factory=Counter)  # (status, type) of every 5xx answer
    resent: int = 0
    acknowledged: dict[tuple[str, int, int], str] = field(default_factory=dict)  # attempt -> outcome a 200 took
    claimed: Counter = field(default_factory=Counter)  # attempt -> times a claim handed it out
    unanswered: list[str] = field(default_factory=list)  # requests refused past RESENDS
    lock: threading.Lock = field(default_factory=threading.Lock)
    wanted: int = 0  # settles to acknowledge before the mix may end (run_mix's `settles`)
    settled: threading.Event = field(default_factory=threading.Event)  # set once `wanted` are acknowledged

    def by_status(self) -> Counter:
        totals: Counter = Counter()
        for (_, status), n in self.statuses.items():
            totals[status] += n
        return totals


class Actor:
    """One thread's HTTP connection, counting and resending as an agent does."""

    def __init__(self, url: str, tally: Tally, stop: threading.Event) -> None:
        self.http = httpx.Client(base_url=url, timeout=60, verify=False)
        self.tally, self.stop = tally, stop

    def send(self, route: str, method: str, path: str, **kwargs: Any) -> httpx.Response | None:
        """The request's last answer: resent after a 503 or a lost connection; None if it
        never got one past those."""
        for n in range(RESENDS + 1):
            try:
                resp = self.http.request(method, path, **kwargs)
            except httpx.TransportError:
                status = 0  # the connection was lost: no answer
            else:
                status = resp.status_code
            with self.tally.lock:
                self.tally.statuses[route, status] += 1
                if status >= 500:
                    self.tally.problems[status, resp.json().get("type")] += 1
                if n:
                    self.tally.resent += 1
            if status not in (0, 503):
                return resp
            time.sleep(0.02 * (n + 1))
        with self.tally.lock:
            self.tally.unanswered.append(f"{method} {path}")
        return None


@dataclass
class Held:
    """An attempt a worker holds: its token and whether it was reported running."""

    key: tuple[str, int, int]
    token: str
    running: bool = False


class WorkerActor(Actor):
    """A worker: claims, then reports its attempts' `running`, heartbeats and outcomes, mostly in
    batches, some as single reports."""

    def __init__(self, url: str, tally: Tally, stop: threading.Event, worker_token: str, seed: int) -> None:
        super().__init__(url, tally, stop)
        self.headers, self.random = bearer(worker_token), random.Random(seed)
        self.held: dict[tuple[str, int, int], Held] = {}

    def run(self) -> None:
        while not self.stop.is_set():
            self.claim()
            self.report()

    def claim(self) -> None:
        resp = self.send("claim", "POST", "/v1/dispatch/claim", headers=self.headers,
                         json={"limit": self.random.randint(1, 8)})
        if resp is None or resp.status_code != 200:
            return
        for item in resp.json()["items"]:
            c = item["correlation"]
            key = (c["ti_id"], c["try_number"], c["attempt_epoch"])
            with self.tally.lock:
                self.tally.claimed[key] += 1
            self.held[key] = Held(key, item["attempt_token"])

    def outcome(self) -> dict[str, Any]:
        roll = self.random.random()
        if roll < 0.7:
            return {"state": "success"}
        state = "failed" if roll < 0.9 else "unexecutable"
        return {"state": state, "reason": REASONS[state]}

    def report(self) -> None:
        entries, settles = [], []
        for held in list(self.held.values()):
            if not held.running:
                entries.append((held, {"op": "report", "state": "running"}))
            elif self.random.random() < 0.5:
                entries.append((held, {"op": "heartbeat"}))
            elif self.random.random() < 0.3:
                self.single(held, self.outcome())
            else:
                report = self.outcome()
                entries.append((held, {"op": "report", **report}))
                settles.append(held)
        if not entries:
            return
        resp = self.send("batch", "POST", "/v1/attempts/batch", headers=self.headers, json={"entries": [
            {"attempt_token": held.token, **entry} for held, entry in entries]})
        if resp is None or resp.status_code != 200:
            return
        for (held, entry), result in zip(entries, resp.json()["results"], strict=True):
            self.answered(held, entry.get("state"), result["status"])

    def single(self, held: Held, report: dict[str, Any]) -> None:
        resp = self.send("report", "POST", "/v1/attempts/report", headers=bearer(held.token), json=report)
        if resp is not None:
            self.answered(held, report["state"], resp.status_code)

    def answered(self, held: Held, state: str | None, status: int) -> None:
        """What an attempt's answer means for the worker: a stale attempt is dropped, an
        acknowledged outcome recorded and the attempt done."""
        if status == 409 or status == 404:
            self.held.pop(held.key, None)
        elif status == 200 and state == "running":
            held.running = True
        elif status == 200 and state is not None:
            with self.tally.lock:
                self.tally.acknowledged[held.key] = state
                if len(self.tally.acknowledged) >= self.tally.wanted:
                    self.tally.settled.set()
            self.held.pop(held.key, None)


class OperatorActor(Actor):
    """The operator: clears task instances, clears runs' failures, sweeps, and keeps work coming."""

    def __init__(self, url: str, tally: Tally, stop: threading.Event, token: str, seed: int,
                 make_run: Callable[["OperatorActor"], None]) -> None:
        super().__init__(url, tally, stop)
        self.headers, self.random, self.make_run = bearer(token), random.Random(seed), make_run
        self.runs: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            roll = self.random.random()
            if not self.runs or roll < 0.15:
                self.make_run(self)
            elif roll < 0.45:
                self.clear_one()
            elif roll < 0.7:
                self.send("clear-failed", "POST", f"/v1/runs/mix/{self.recent()}/clear-failed", headers=self.headers)
            else:
                self.send("reap", "POST", "/v1/admin/reap", headers=self.headers)

    def recent(self) -> str:
        """One of the last runs created: those the workers are busy with."""
        return self.random.choice(self.runs[-RECENT:])

    def clear_one(self) -> None:
        resp = self.send("read", "GET", f"/v1/runs/mix/{self.recent()}", headers=self.headers)
        if resp is None or resp.status_code != 200:
            return
        started = [ti for ti in resp.json()["task_instances"] if ti["state"] not in ("none", "scheduled")]
        if started:
            self.send("clear", "POST", f"/v1/task-instances/{self.random.choice(started)['ti_id']}/clear",
                      headers=self.headers)


def create_run(actor: OperatorActor, width: int = 12) -> None:
    """A run of `width` tasks and one that waits on the first three (readiness on every success)."""
    run_id = f"r-{uuid.uuid4().hex[:10]}"
    tasks = [task(f"t{n:02}", retries=1, max_infra_attempts=3) for n in range(width)]
    tasks.append(task("join", "t00", "t01", "t02", retries=1))
    resp = actor.send("create", "POST", "/v1/runs", headers=actor.headers,
                      json={"dag_id": "mix", "run_id": run_id, "tasks": tasks})
    if resp is not None and resp.status_code == 201:
        actor.runs = [*actor.runs[-RECENT:], run_id]


def run_mix(url: str, operator: Operator, seconds: float, *, workers: int = 2, threads: int = 2,
            operators: int = 1, extra: list[Callable[[threading.Event], None]] = (), settles: int = 0) -> Tally:
    """The mix against the server at `url` for `seconds`, and on until `settles` settles were
    acknowledged (a loaded machine settles fewer a second): `workers` executions, each claiming
    and reporting from `threads` threads (as a worker's claim loop and write coalescer run side by
    side), and `operators` operators (`extra`: more actors, each a function
    of the stop event, run in threads of their own); answers the tally."""
    json_ok = operator.patch("/v1/pools/default_pool", json={"slots": 100_000})
    assert json_ok.status_code == 200, json_ok.text
    tally, stop = Tally(wanted=settles), threading.Event()
    actors: list[Actor] = []
    for n in range(workers):
        admitted = operator.admit(f"mix-worker-{n}")
        actors += [WorkerActor(url, tally, stop, admitted["worker_token"], seed=n * threads + k)
                   for k in range(threads)]
    for n in range(operators):
        actors.append(OperatorActor(url, tally, stop, operator.token, seed=100 + n, make_run=create_run))
    threads = [threading.Thread(target=a.run, daemon=True) for a in actors]
    threads += [threading.Thread(target=e, args=(stop,), daemon=True) for e in extra]
    for t in threads:
        t.start()
    stop.wait(seconds)
    if settles:
        tally.settled.wait(timeout=60)
    stop.set()
    for t in threads:
        t.join(timeout=120)
    for a in actors:
        a.http.close()
    return tally


# Per record: an agent's outcome is success, or failed/unexecutable with the mix's reason.
RECORDS = text("SELECT CAST(task_instance_id AS TEXT), try_number, attempt_epoch, state, reason FROM task_attempts")


def audit(engine: Engine, tally: Tally) -> list[str]:
    """Where the database disagrees with what the answers said (empty: every settle exactly once)."""
    wrong: list[str] = []
    with engine.connect() as conn:
        records = {(str(uuid.UUID(ti)), t, e): (state, reason) for ti, t, e, state, reason in conn.execute(RECORDS)}
    for key, times in tally.claimed.items():
        if times != 1:
            wrong.append(f"attempt {key} was handed out by {times} claims")
    for key, outcome in tally.acknowledged.items():
        if records.get(key, (None,))[0] != outcome:
            wrong.append(f"attempt {key}: {outcome} acknowledged, record says {records.get(key)}")
    ended: Counter = Counter()
    for key, (state, reason) in records.items():
        by_agent = state == "success" or (state in REASONS and reason == REASONS[state])
        if by_agent and key not in tally.acknowledged:
            wrong.append(f"attempt {key}: record says {state} ({reason}), no 200 acknowledged it")
        if state in ("success", "failed", "marked_success", "marked_failed"):
            ended[key[:2]] += 1
    wrong += [f"try {k} ended {n} times" for k, n in ended.items() if n > 1]
    return wrong
