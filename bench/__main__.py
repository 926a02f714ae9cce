"""The figures of docs/performance.md in one table: `python -m bench [--seconds 10] [--only …]`.

Every figure runs against a real `fenceline serve` on a throw-away database (bench/common.py)
and carries the server's own CPU seconds, read from /proc for the server and its worker
processes, over the figure's measured interval:

- roundtrips: attempt round trips (claim, running, heartbeat, success) at 16 agents on
  PostgreSQL with `--workers 1` and `--workers 2`: per second, p99, server CPU-ms per round trip;
- reads: GET …/tries, GET …/logs/1?full_content=true (JSON) and the heartbeat at concurrency 8,
  one server process, on SQLite and PostgreSQL;
- biglog: a 200 MB collapsed log (three epochs) read whole through /api/v2 JSON, NDJSON and
  /api/v1 text: MB/s and the server's resident-memory growth;
- fleet: bench/fleet.py's figure (idle waiting claimers plus busy agents), when that module exists.
"""

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.attempts import agent, create_runs, worker_headers  # noqa: E402
from bench.common import Server, concurrent_rate, table  # noqa: E402

MB = 1024 * 1024
HEADERS = ["figure", "db", "server", "n", "per s", "p50 ms", "p99 ms", "server CPU s", "CPU ms / op", "note"]


def measured(server: Server, count: int, seconds: float, work) -> tuple[list[object], float]:
    """concurrent_rate's row and the server CPU seconds spent while it ran."""
    before = server.cpu_seconds()
    row = concurrent_rate(count, seconds, work)
    return row, server.cpu_seconds() - before


def figure(name: str, backend: str, workers: int, row: list[object], cpu: float, note: str = "") -> list[object]:
    _, n, rate, p50, p99 = row
    return [name, backend, f"{workers} proc", n, rate, p50, p99, cpu, cpu * 1000 / max(n, 1), note]


def roundtrips(seconds: float, agents: int = 16) -> list[list[object]]:
    return [_roundtrips_on(workers, seconds, agents) for workers in (1, 2)]


def _roundtrips_on(workers: int, seconds: float, agents: int) -> list[object]:
    with Server("postgresql", "--workers", str(workers)) as server, server.client() as client:
        operator = server.operator(client)
        create_runs(client, operator, 4_000)
        heads = [worker_headers(client, operator, f"bench-{n}") for n in range(agents)]
        row, cpu = measured(server, agents, seconds, lambda n, d, s: agent(server, heads[n], d, s))
        return figure(f"round trips ({agents} agents)", "postgresql", workers, row, cpu,
                      "claim+running+heartbeat+success")


def _seed_reads(client: httpx.Client, operator: dict[str, str]) -> tuple[str, str, dict[str, str]]:
    """A task with three tries, each with a log, and a running task to heartbeat (the same shape
    as the Airflow peer's seed): answers the tries URL, the log URL and the heartbeat token."""
    client.post("/v1/runs", headers=operator, json={"dag_id": "peer_bench", "run_id": "r", "tasks": [
        {"task_id": "hello", "payload": {"command": ["true"]}, "retries": 2, "retry_delay": 0},
        {"task_id": "hb", "payload": {"command": ["true"]}}]}).raise_for_status()
    worker = worker_headers(client, operator, "reads")
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
    return base + "/tries", base + "/logs/1", beat


def reads(seconds: float, concurrency: int = 8) -> list[list[object]]:
    return [row for backend in ("sqlite", "postgresql") for row in _reads_on(backend, seconds, concurrency)]


def _reads_on(backend: str, seconds: float, concurrency: int) -> list[list[object]]:
    rows = []
    with Server(backend, "--workers", "1") as server, server.client() as client:
        operator = server.operator(client)
        tries, log, beat = _seed_reads(client, operator)
        calls = {
            "GET tries": lambda http: http.get(tries, headers=operator),
            "GET log JSON (full)": lambda http: http.get(log, params={"full_content": "true"},
                                                         headers={**operator, "Accept": "application/json"}),
            "heartbeat": lambda http: http.post("/v1/attempts/heartbeat", headers=beat),
        }
        for name, call in calls.items():
            def work(n, deadline, samples, call=call):
                with server.client() as http:
                    while time.monotonic() < deadline:
                        start = time.perf_counter()
                        call(http).raise_for_status()
                        samples.append(time.perf_counter() - start)
            row, cpu = measured(server, concurrency, seconds, work)
            rows.append(figure(f"{name} (c={concurrency})", backend, 1, row, cpu))
    return rows


def _fill_three_epochs(client: httpx.Client, operator: dict[str, str], megabytes: int) -> None:
    """One try whose log is three epochs of megabytes/3 MB each: two re-placed, the last a success."""
    client.post("/v1/runs", headers=operator, json={"dag_id": "big", "run_id": "r", "tasks": [
        {"task_id": "big", "payload": {"command": ["true"]}, "max_infra_attempts": 5}]}).raise_for_status()
    worker = worker_headers(client, operator, "big")
    line = "x" * 99 + "\n"
    chunk = line * (MB // len(line))
    for outcome in ("unexecutable", "unexecutable", "success"):
        items = []
        while not items:
            items = client.post("/v1/dispatch/claim", json={"limit": 1}, headers=worker).json()["items"]
        attempt = {"Authorization": f"Bearer {items[0]['attempt_token']}"}
        client.post("/v1/attempts/report", json={"state": "running"}, headers=attempt).raise_for_status()
        offset = 0
        while offset < megabytes * MB // 3:
            offset = client.post("/v1/attempts/logs", json={"offset": offset, "content": chunk},
                                 headers=attempt).raise_for_status().json()["size"]
        client.post("/v1/attempts/report", json={"state": outcome, "reason": "evicted"},
                    headers=attempt).raise_for_status()


def biglog(megabytes: int) -> list[list[object]]:
    rows = []
    with Server("postgresql", "--workers", "1", infra_backoff_base_seconds="0") as server, \
            server.client() as client:
        operator = server.operator(client)
        _fill_three_epochs(client, operator, megabytes)
        base = "/dags/big/dagRuns/r/taskInstances/big/logs/1"
        routes = {"/api/v2 JSON": (f"/api/v2{base}", "application/json"),
                  "/api/v2 NDJSON": (f"/api/v2{base}", "application/x-ndjson"),
                  "/api/v1 text": (f"/api/v1{base}", "text/plain")}
        for name, (path, accept) in routes.items():
            cpu = server.cpu_seconds()
            with server.peak_rss() as rss:
                start, size = time.perf_counter(), 0
                with client.stream("GET", path, params={"full_content": "true"},
                                   headers={**operator, "Accept": accept}) as resp:
                    resp.raise_for_status()
                    for part in resp.iter_raw():
                        size += len(part)
                elapsed = time.perf_counter() - start
            cpu = server.cpu_seconds() - cpu
            rows.append([f"{megabytes} MB log, 3 epochs, {name}", "postgresql", "1 proc", 1, size / MB / elapsed,
                         elapsed * 1000, elapsed * 1000, cpu, cpu * 1000,
                         f"{size / MB:.0f} MB sent at {size / MB / elapsed:.0f} MB/s; RSS growth "
                         f"{(rss[1] - rss[0]) / MB:.0f} MB"])
    return rows


def fleet(seconds: float) -> list[list[object]]:
    """The fleet figure, if bench/fleet.py (waiting claims) exists: its `run` answers rows."""
    if importlib.util.find_spec("bench.fleet") is None:
        return []
    from bench import fleet as module

    return module.run(seconds)


FIGURES = {"roundtrips": lambda a: roundtrips(a.seconds), "reads": lambda a: reads(a.seconds),
           "biglog": lambda a: biglog(a.log_mb), "fleet": lambda a: fleet(a.seconds)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10, help="measured time per figure")
    parser.add_argument("--log-mb", type=int, default=200)
    parser.add_argument("--only", default=",".join(FIGURES), help="figures to run, comma-separated")
    args = parser.parse_args()
    rows = []
    for name in args.only.split(","):
        print(f"bench: {name} …", file=sys.stderr, flush=True)
        rows += FIGURES[name](args)
    print(table(HEADERS, rows))


if __name__ == "__main__":
    main()
