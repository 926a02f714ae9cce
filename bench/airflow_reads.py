"""Airflow-compatible reads: tries-list and full-log reads per second with p50/p99, for a task
instance with 20 tries x 3 epochs and one with a 50 MB log, and the server's peak memory while
it serves that log (sampled from /proc). Run: python bench/airflow_reads.py [--log-mb 50]."""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Server, admit, percentile, table  # noqa: E402

DAG = "bench"
CHUNK = 512 * 1024


def _claim(client, worker):
    items = client.post("/v1/dispatch/claim", json={"limit": 1}, headers=worker).json()["items"]
    return {"Authorization": f"Bearer {items[0]['attempt_token']}"}


def build(client, operator) -> None:
    """`tries`: 20 tries, each re-placed twice before its own outcome; `big`: one try, a large log."""
    client.post("/v1/runs", headers=operator, json={"dag_id": DAG, "run_id": "r", "tasks": [
        {"task_id": "tries", "payload": {"command": ["true"]}, "retries": 19, "retry_delay": 0,
         "max_infra_attempts": 2},
        {"task_id": "big", "payload": {"command": ["true"]}, "upstream": ["tries"]}]}).raise_for_status()
    worker = admit(client, operator, "bench-worker")
    for n in range(20):
        for outcome in ({"state": "unexecutable", "reason": "evicted"},
                        {"state": "unexecutable", "reason": "node_lost"},
                        {"state": "success" if n == 19 else "failed"}):
            attempt = _claim(client, worker)
            client.post("/v1/attempts/report", json={"state": "running"}, headers=attempt).raise_for_status()
            client.post("/v1/attempts/logs", json={"offset": 0, "content": f"try {n + 1} {outcome}\n" * 20},
                        headers=attempt).raise_for_status()
            client.post("/v1/attempts/report", json=outcome, headers=attempt).raise_for_status()
    return worker


def fill_log(client, worker, megabytes: int) -> None:
    attempt = _claim(client, worker)
    client.post("/v1/attempts/report", json={"state": "running"}, headers=attempt).raise_for_status()
    line = "x" * 99 + "\n"
    chunk = line * (CHUNK // len(line))
    offset = 0
    while offset < megabytes * 1024 * 1024:
        offset = client.post("/v1/attempts/logs", json={"offset": offset, "content": chunk},
                             headers=attempt).json()["size"]
    client.post("/v1/attempts/report", json={"state": "success"}, headers=attempt).raise_for_status()


def timed(call, count: int) -> list[float]:
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples


def row(name: str, samples: list[float], extra: str = "") -> list[object]:
    return [name, len(samples), len(samples) / sum(samples), percentile(samples, 0.5) * 1000,
            percentile(samples, 0.99) * 1000, extra]


def run(backend: str, megabytes: int, reads: int) -> list[list[object]]:
    # Re-placed attempts are claimable at once, so the setup does not wait out back-offs.
    with Server(backend, infra_backoff_base_seconds="0") as server, server.client() as client:
        operator = server.operator(client)
        worker = build(client, operator)
        fill_log(client, worker, megabytes)
        base = f"/api/v2/dags/{DAG}/dagRuns/r/taskInstances"
        tries = timed(lambda: client.get(f"{base}/tries/tries", headers=operator).raise_for_status(), reads)
        one_try = timed(lambda: client.get(f"{base}/tries/logs/20", headers=operator,
                                           params={"full_content": "true"}).raise_for_status(), reads)
        results = {}
        with server.peak_rss() as rss:
            for name, accept in (("v2 json", "application/json"), ("v2 ndjson", "application/x-ndjson")):
                def read(accept=accept) -> None:
                    with client.stream("GET", f"{base}/big/logs/1", headers={**operator, "Accept": accept},
                                       params={"full_content": "true"}) as resp:
                        resp.raise_for_status()
                        for _ in resp.iter_bytes():
                            pass
                results[name] = timed(read, 3)
        mem = f"RSS {rss[0] / 2**20:.0f} MB before, peak {rss[1] / 2**20:.0f} MB while serving"
        size = f"{megabytes} MB log"
        return [[backend, *row("tries list (20 tries x 3 epochs)", tries)],
                [backend, *row("log of one 3-epoch try", one_try)],
                [backend, *row(f"full log, v2 json ({size})", results["v2 json"], mem)],
                [backend, *row(f"full log, v2 ndjson ({size})", results["v2 ndjson"])]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--log-mb", type=int, default=50)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--backends", default="sqlite,postgresql")
    args = parser.parse_args()
    rows = []
    for backend in args.backends.split(","):
        rows += run(backend, args.log_mb, args.reads)
    print(table(["db", "read", "n", "per s", "p50 ms", "p99 ms", "memory"], rows))


if __name__ == "__main__":
    main()
