"""What a request costs as history grows (issue 45, contract 8): one `fenceline serve --workers 1`
on a throw-away PostgreSQL database, seeded with SQL (bench/seeding.py) to each size in turn
(10k and 1M task instances; 10M with --huge), and at each size every list an operator or a
worker reads daily: p50/p99 of sequential requests, and the CPU per request of the server and
of the database's backends (from /proc). Then the database's size per task instance.

Last, on the largest size, `db clean --before` (--clean-days ago, the seeded history being 60
days long) while a worker claims and settles against the server (bench/clean.py): the rows
deleted per second and the claims' p50/p99 before and during it.

Run: python -m bench.growth [--sizes 10000,1000000] [--huge] [--requests 50] [--seconds 20]
[--clean-days 30 | --clean-days 0 to skip the clean].
"""

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.clean import measure_clean  # noqa: E402
from bench.common import ADMIN_PASSWORD, PostgresCpu, Server, admit, percentile, table  # noqa: E402
from bench.seeding import DAGS, RUNNING, seed, size_per_task_instance  # noqa: E402

HEADERS = ["task instances", "request", "n", "p50 ms", "p99 ms", "server CPU ms/req", "PG CPU ms/req"]
TI_LIST = "/api/v2/dags/~/dagRuns/~/taskInstances?state=success&limit=100"
# A finished run near the newest, its DAG, and one of its task instances with the tries to list.
RUN = RUNNING + 7
DAG, RUN_ID = f"dag_{RUN % DAGS:03d}", f"r{RUN:09d}"


def measure(server: Server, call: Callable[[], httpx.Response], requests: int, seconds: float) -> list[object]:
    """`requests` calls one after another (fewer if they take more than `seconds`, at least 5):
    n, p50 and p99 in ms, and the server's and the database backends' CPU ms per call."""
    call().raise_for_status()  # warm: the first call compiles statements and fills caches
    samples: list[float] = []
    database = server.database_url.rsplit("/", 1)[1]
    cpu, pg = server.cpu_seconds(), PostgresCpu(database).start()
    deadline = time.monotonic() + seconds
    while len(samples) < requests and (len(samples) < 5 or time.monotonic() < deadline):
        start = time.perf_counter()
        call().raise_for_status()
        samples.append(time.perf_counter() - start)
    n = len(samples)
    server_ms, pg_ms = (server.cpu_seconds() - cpu) * 1000 / n, pg.stop() * 1000 / n
    return [n, percentile(samples, 0.5) * 1000, percentile(samples, 0.99) * 1000, server_ms, pg_ms]


def read_table(server: Server, client: httpx.Client, headers: dict[str, dict[str, str]], requests: int,
               seconds: float) -> list[list[object]]:
    """One row per list: [request, n, p50, p99, server CPU ms, PG CPU ms]. `headers`: the
    operator's and a worker's; the client is logged in to the dashboard."""
    operator, worker = headers["operator"], headers["worker"]
    total = client.get(TI_LIST, headers=operator).raise_for_status().json()["total_entries"]
    calls = {
        "worker claim, limit 1": lambda: client.post("/v1/dispatch/claim", json={"limit": 1}, headers=worker),
        "tries list": lambda: client.get(f"/api/v2/dags/{DAG}/dagRuns/{RUN_ID}/taskInstances/t3/tries",
                                         headers=operator),
        "reaper sweep": lambda: client.post("/v1/admin/reap", headers=operator),
        "TI list, state=success, limit 100": lambda: client.get(TI_LIST, headers=operator),
        f"same, offset {total // 2:,} (half)": lambda: client.get(f"{TI_LIST}&offset={total // 2}", headers=operator),
        "one DAG's TI list": lambda: client.get(f"/api/v2/dags/{DAG}/dagRuns/~/taskInstances?limit=100",
                                                headers=operator),
        "/ui/runs": lambda: client.get("/ui/runs"),
    }
    return [[name, *measure(server, call, requests, seconds)] for name, call in calls.items()]


def serving(server: Server, client: httpx.Client) -> dict[str, dict[str, str]]:
    """Log the client in to the dashboard; answers the operator's and a worker's headers."""
    operator = server.operator(client)
    login = client.post("/ui/login", data={"username": "admin", "password": ADMIN_PASSWORD})
    assert login.status_code == 303, login.text
    return {"operator": operator, "worker": admit(client, operator, "growth")}


def run(sizes: list[int], requests: int, seconds: float, clean_days: float) -> list[list[object]]:
    rows = []
    with Server("postgresql", "--workers", "1") as server, server.client() as client:
        headers = serving(server, client)
        for size in sizes:
            start = time.monotonic()
            added = seed(server.database_url, size)
            print(f"seeded {added:,} task instances in {time.monotonic() - start:.0f} s; load average "
                  f"{os.getloadavg()[0]:.1f}", file=sys.stderr)
            rows += [[f"{size:,}", *row] for row in read_table(server, client, headers, requests, seconds)]
            per_ti = size_per_task_instance(server.database_url)
            rows.append([f"{size:,}", "database size per task instance (bytes)", "", per_ti, "", "", ""])
            print(f"measured {size:,}; load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
        if clean_days:
            print(table(HEADERS, rows), flush=True)  # the reads, before the clean's own table
            measure_clean(server.database_url, before_days=clean_days)
            print(f"cleaned; load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,1000000", help="task instances, comma-separated, ascending")
    parser.add_argument("--huge", action="store_true", help="add 10,000,000 (about 30 GB and an hour of seeding)")
    parser.add_argument("--requests", type=int, default=50, help="requests per list and size")
    parser.add_argument("--seconds", type=float, default=20, help="at most this long per list (at least 5 requests)")
    parser.add_argument("--clean-days", type=float, default=30, help="db clean --before this many days ago "
                        "on the largest size (0: no clean)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")] + ([10_000_000] if args.huge else [])
    rows = run(sizes, args.requests, args.seconds, args.clean_days)
    if not args.clean_days:
        print(table(HEADERS, rows))


if __name__ == "__main__":
    main()
