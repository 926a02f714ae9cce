"""Server CPU per claim round trip (claim, running, success) with and without routing: plain
claims (every task on the default queue and pool, no tenant) against routed claims (tasks on
two queues and three pools with room to spare, four tenants, one capped, mixed priorities,
claims serving both queues). Server CPU is the CPU of `fenceline serve --workers 1` (its process
tree) plus that of the PostgreSQL backends serving its database, from /proc/<pid>/stat over the
measured interval, divided by the round trips. Run from a checkout:
python bench/routing.py [--seconds 10] [--agents 8] [--scenarios plain,routed]; run it with the
working directory of another checkout (PYTHONPATH=. python /path/to/bench/routing.py
--scenarios plain) to measure that checkout's plain claims."""

import argparse
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Server, admit, concurrent_rate, cpu_seconds, table  # noqa: E402

TASKS_PER_RUN = 100
TENANTS = ["alpha", "beta", "gamma", None]
ROUTES = [{"queue": "default", "pool": "default_pool"}, {"queue": "default", "pool": "loads"},
          {"queue": "gpu", "pool": "gpus"}]


def database_cpu(server: Server) -> dict[int, float]:
    """CPU seconds of each PostgreSQL backend serving the bench database (none on SQLite)."""
    if server.database_url is None:
        return {}
    with psycopg.connect(server.database_url) as conn:
        pids = [pid for (pid,) in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend'")]
    return {pid: cpu_seconds(pid) for pid in pids if Path(f"/proc/{pid}").exists()}


def prepare(client, operator, scenario: str, tasks: int) -> list[str]:
    """Ready work of `scenario`; answers the queues the claims serve."""
    if scenario == "routed":
        for name in ("loads", "gpus"):
            client.post("/v1/pools", headers=operator, json={"name": name, "slots": 64}).raise_for_status()
        client.put("/v1/tenants/alpha", headers=operator, json={"max_running": 64}).raise_for_status()
    for n in range(0, tasks, TASKS_PER_RUN):
        def fields(i: int) -> dict:
            return {**ROUTES[i % 3], "priority_weight": i % 5} if scenario == "routed" else {}
        body = {"dag_id": "bench", "run_id": f"r{n}", "tasks": [
            {"task_id": f"t{i}", "payload": {"command": ["true"]}, **fields(i)}
            for i in range(min(TASKS_PER_RUN, tasks - n))]}
        if scenario == "routed" and TENANTS[(n // TASKS_PER_RUN) % 4]:
            body["tenant_id"] = TENANTS[(n // TASKS_PER_RUN) % 4]
        client.post("/v1/runs", headers=operator, json=body).raise_for_status()
    return ["default", "gpu"] if scenario == "routed" else ["default"]


def agent(server: Server, worker: dict[str, str], queues: list[str], deadline: float, samples: list[float]) -> None:
    body = {"limit": 1} if queues == ["default"] else {"limit": 1, "queues": queues}
    with server.client() as client:
        while time.monotonic() < deadline:
            start = time.perf_counter()
            items = client.post("/v1/dispatch/claim", json=body, headers=worker).json()["items"]
            if not items:
                return
            token = {"Authorization": f"Bearer {items[0]['attempt_token']}"}
            for state in ("running", "success"):
                client.post("/v1/attempts/report", json={"state": state}, headers=token).raise_for_status()
            samples.append(time.perf_counter() - start)


def run(backend: str, scenario: str, seconds: float, agents: int, tasks: int) -> list[object]:
    with Server(backend, "--workers", "1") as server, server.client() as client:
        operator = server.operator(client)
        queues = prepare(client, operator, scenario, tasks)
        workers = [admit(client, operator, f"bench-{n}") for n in range(agents)]
        before, db_before = server.cpu_seconds(), database_cpu(server)
        row = concurrent_rate(agents, seconds,
                              lambda n, deadline, samples: agent(server, workers[n], queues, deadline, samples))
        used = server.cpu_seconds() - before
        db_used = sum(cpu - db_before.get(pid, 0.0) for pid, cpu in database_cpu(server).items())
        return [backend, scenario, *row, used / row[1] * 1000, db_used / row[1] * 1000,
                (used + db_used) / row[1] * 1000]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=3000, help="ready task instances to draw from")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--scenarios", default="plain,routed")
    args = parser.parse_args()
    rows = [run(b, s, args.seconds, args.agents, args.tasks)
            for b in args.backends.split(",") for s in args.scenarios.split(",")]
    print(table(["db", "claims", "agents", "round trips", "per s", "p50 ms", "p99 ms", "app CPU ms/trip",
                 "db CPU ms/trip", "server CPU ms/trip"], rows))
    print("(a round trip: claim, running, success: three requests)")


if __name__ == "__main__":
    main()
