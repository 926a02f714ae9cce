"""The reads Airflow tooling makes, and an agent's heartbeat, at a fixed concurrency against one
`fenceline serve --workers 1` on SQLite and on a throw-away PostgreSQL database: GET …/tries,
GET …/logs/1?full_content=true (JSON) and POST /v1/attempts/heartbeat. The seed is the Airflow
peer's (../shared/peers/airflow/seed.py): a task with three tries, ten log lines each, and a
running task to heartbeat. Prints requests/s, p50/p99 and the server's CPU per request.

    python bench/reads.py [--seconds 8] [--concurrency 8] [--backends sqlite,postgresql]

../shared/peers/sidebyside.py measures the same three against Airflow 3.3.2 in one run.
"""

import argparse
import asyncio
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Server, admit, percentile, table  # noqa: E402
from bench.load import Connection  # noqa: E402

HEADERS = ["figure", "db", "requests", "per s", "p50 ms", "p99 ms", "server CPU ms / request"]


def seed(client: httpx.Client, operator: dict[str, str]) -> tuple[str, str, dict[str, str]]:
    """A task with three tries, each with a log, and a running task to heartbeat: answers the
    tries path, the log path and the heartbeat's attempt token."""
    client.post("/v1/runs", headers=operator, json={"dag_id": "peer_bench", "run_id": "r", "tasks": [
        {"task_id": "hello", "payload": {"command": ["true"]}, "retries": 2, "retry_delay": 0},
        {"task_id": "hb", "payload": {"command": ["true"]}}]}).raise_for_status()
    worker = admit(client, operator, "reads")
    beat = None
    for n in (1, 2, 3):
        for item in client.post("/v1/dispatch/claim", json={"limit": 2}, headers=worker).json()["items"]:
            attempt = {"Authorization": f"Bearer {item['attempt_token']}"}
            client.post("/v1/attempts/report", json={"state": "running"}, headers=attempt).raise_for_status()
            if item["correlation"]["task_id"] == "hb":
                beat = attempt
                continue
            client.post("/v1/attempts/logs", headers=attempt, json={
                "offset": 0, "content": "".join(f"[2026-01-01T00:00:0{i}Z] try {n} line {i}\n" for i in range(10))})
            client.post("/v1/attempts/report", json={"state": "failed" if n < 3 else "success"},
                        headers=attempt).raise_for_status()
    base = "/api/v2/dags/peer_bench/dagRuns/r/taskInstances/hello"
    assert beat is not None
    return base + "/tries", base + "/logs/1?full_content=true", beat


async def hammer(url: str, method: str, path: str, headers: dict[str, str], concurrency: int,
                 seconds: float) -> tuple[list[float], float]:
    samples: list[float] = []
    deadline = time.monotonic() + seconds

    async def one() -> None:
        async with Connection(url) as http:
            while time.monotonic() < deadline:
                start = time.perf_counter()
                status, _ = await http.request(method, path, None, headers)
                if status != 200:
                    raise RuntimeError(f"{method} {path}: {status}")
                samples.append(time.perf_counter() - start)

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(concurrency)))
    return samples, time.perf_counter() - started


def measure(backend: str, seconds: float, concurrency: int) -> list[list[object]]:
    rows = []
    with Server(backend, "--workers", "1") as server, server.client() as client:
        operator = server.operator(client)
        tries, log, beat = seed(client, operator)
        calls = {"GET tries": ("GET", tries, operator),
                 "GET log JSON (full)": ("GET", log, {**operator, "Accept": "application/json"}),
                 "heartbeat": ("POST", "/v1/attempts/heartbeat", beat)}
        for name, (method, path, headers) in calls.items():
            asyncio.run(hammer(server.url, method, path, headers, concurrency, 1))  # warm up
            cpu = server.cpu_seconds()
            samples, elapsed = asyncio.run(hammer(server.url, method, path, headers, concurrency, seconds))
            cpu = server.cpu_seconds() - cpu
            rows.append([f"{name} (c={concurrency})", backend, len(samples), len(samples) / elapsed,
                         1000 * percentile(samples, 0.5), 1000 * percentile(samples, 0.99),
                         1000 * cpu / max(1, len(samples))])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--backends", default="sqlite,postgresql")
    args = parser.parse_args()
    rows = [row for backend in args.backends.split(",") for row in measure(backend, args.seconds, args.concurrency)]
    print(table(HEADERS, rows))


if __name__ == "__main__":
    main()
