"""Attempt round trips (claim, running, heartbeat, success: four requests) by concurrent agents
against a real `fenceline serve` on a throw-away PostgreSQL database, the agents drawing from
runs of 1,000 ready tasks (as ../shared/peers/roundtrips.py does, so that they contend for one
run at a time). Prints round trips per second, p50/p99 of one round trip, and the CPU the server,
PostgreSQL and the load generator each used over the measured window (from /proc).

    python bench/roundtrips.py [--workers 1,2] [--agents 16] [--seconds 10]
"""

import argparse
import asyncio
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Server, admit, percentile, postgres_cpu_seconds, table  # noqa: E402
from bench.load import Connection  # noqa: E402

TASKS_PER_RUN = 1000
HEADERS = ["server", "agents", "round trips", "per s", "p50 ms", "p99 ms", "server CPU ms / rt",
           "PostgreSQL CPU ms / rt", "load generator CPU ms / rt"]


def create_runs(client, operator, tasks: int, per_run: int = TASKS_PER_RUN) -> None:
    for n in range(0, tasks, per_run):
        client.post("/v1/runs", headers=operator, json={"dag_id": "bench", "run_id": f"r{n:06}", "tasks": [
            {"task_id": f"t{i}", "payload": {"command": ["true"]}} for i in range(min(per_run, tasks - n))]}
                    ).raise_for_status()


async def agent(url: str, worker: dict[str, str], deadline: float, samples: list[float]) -> None:
    """Round trips until the deadline (or until no work is left)."""
    async with Connection(url) as http:
        while time.monotonic() < deadline:
            start = time.perf_counter()
            items = (await http.json("POST", "/v1/dispatch/claim", {"limit": 1}, worker))["items"]
            if not items:
                return
            token = {"Authorization": f"Bearer {items[0]['attempt_token']}"}
            await http.json("POST", "/v1/attempts/report", {"state": "running"}, token)
            await http.json("POST", "/v1/attempts/heartbeat", None, token)
            await http.json("POST", "/v1/attempts/report", {"state": "success"}, token)
            samples.append(time.perf_counter() - start)


async def agents(url: str, workers: list[dict[str, str]], seconds: float) -> tuple[list[float], float]:
    samples: list[float] = []
    started = time.perf_counter()
    deadline = time.monotonic() + seconds
    await asyncio.gather(*(agent(url, worker, deadline, samples) for worker in workers))
    return samples, time.perf_counter() - started


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(workers: int, agent_count: int = 16, seconds: float = 10, warmup: float = 2,
            tasks: int = 20_000) -> list[object]:
    """One row of the table: `agent_count` agents against `fenceline serve --workers N`."""
    with Server("postgresql", "--workers", str(workers)) as server, server.client() as client:
        operator = server.operator(client)
        create_runs(client, operator, tasks)
        heads = [admit(client, operator, f"bench-{n}") for n in range(agent_count)]
        asyncio.run(agents(server.url, heads, warmup))  # prepared statements, caches, pools
        before = server.cpu_seconds(), postgres_cpu_seconds(), own_cpu_seconds()
        samples, elapsed = asyncio.run(agents(server.url, heads, seconds))
        server_cpu, pg_cpu, own_cpu = (after - b for after, b in zip(
            (server.cpu_seconds(), postgres_cpu_seconds(), own_cpu_seconds()), before, strict=True))
    n = max(1, len(samples))
    return [f"--workers {workers}", agent_count, len(samples), len(samples) / elapsed,
            1000 * percentile(samples, 0.5), 1000 * percentile(samples, 0.99),
            1000 * server_cpu / n, 1000 * pg_cpu / n, 1000 * own_cpu / n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="1,2", help="server processes per row, comma-separated")
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    rows = [measure(int(w), args.agents, args.seconds) for w in args.workers.split(",")]
    print(table(HEADERS, rows))


if __name__ == "__main__":
    main()
