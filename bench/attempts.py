"""Attempt round trips over HTTP: claim -> running -> heartbeat -> success, per second, with
p50/p99 latency of one round trip, against a real `fenceline serve` on SQLite and on a
throw-away PostgreSQL database; one agent, then several at once (each its own admitted
worker and HTTP client). Run: python bench/attempts.py [--seconds 5] [--agents 8]."""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Server, admit, concurrent_rate, table  # noqa: E402

TASKS_PER_RUN = 100  # a realistic DAG: readiness is judged per run on every finished task


def create_runs(client, operator, tasks: int) -> None:
    for n in range(0, tasks, TASKS_PER_RUN):
        client.post("/v1/runs", headers=operator, json={"dag_id": "bench", "run_id": f"r{n}", "tasks": [
            {"task_id": f"t{i}", "payload": {"command": ["true"]}}
            for i in range(min(TASKS_PER_RUN, tasks - n))]}).raise_for_status()


def agent(server: Server, worker: dict[str, str], deadline: float, samples: list[float]) -> None:
    """Round trips until the deadline or until no work is left."""
    with server.client() as client:
        while time.monotonic() < deadline:
            start = time.perf_counter()
            items = client.post("/v1/dispatch/claim", json={"limit": 1}, headers=worker).json()["items"]
            if not items:
                return
            token = {"Authorization": f"Bearer {items[0]['attempt_token']}"}
            for path, body in (("report", {"state": "running"}), ("heartbeat", None), ("report", {"state": "success"})):
                client.post(f"/v1/attempts/{path}", json=body, headers=token).raise_for_status()
            samples.append(time.perf_counter() - start)


def measure(server: Server, client, operator, agents: int, seconds: float) -> list[object]:
    workers = [admit(client, operator, f"bench-{agents}-{n}") for n in range(agents)]
    return concurrent_rate(agents, seconds, lambda n, deadline, samples: agent(server, workers[n], deadline, samples))


def run(backend: str, seconds: float, agent_counts: list[int], tasks: int) -> list[list[object]]:
    with Server(backend) as server, server.client() as client:
        operator = server.operator(client)
        create_runs(client, operator, tasks)
        return [[backend, *measure(server, client, operator, n, seconds)] for n in agent_counts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5, help="measured time per row")
    parser.add_argument("--agents", default="1,8", help="concurrent agents per row, comma-separated")
    parser.add_argument("--tasks", type=int, default=2000, help="ready task instances to draw from")
    parser.add_argument("--backends", default="sqlite,postgresql")
    args = parser.parse_args()
    counts = [int(n) for n in args.agents.split(",")]
    rows = []
    for backend in args.backends.split(","):
        rows += run(backend, args.seconds, counts, args.tasks)
    print(table(["db", "agents", "round trips", "per s", "p50 ms", "p99 ms"], rows))
    print("(a round trip: claim, running, heartbeat, success: four requests)")


if __name__ == "__main__":
    main()
