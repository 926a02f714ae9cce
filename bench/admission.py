"""Execution admission over HTTP: admissions per second with p50/p99 latency, against a real
`fenceline serve` on SQLite and on a throw-away PostgreSQL database (or a server you name
with --url). Each client replaces the execution of its own seat again and again, naming the
predecessor it got last, so every admission is a generation + 1 that must win its
compare-and-swap; one client, then several at once (each its own HTTP connection).
Run: python bench/admission.py [--seconds 5] [--clients 1,8] [--url URL --password P]."""

import argparse
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ADMIN_PASSWORD, Server, concurrent_rate, table  # noqa: E402
from tests.support.api import Operator  # noqa: E402


def admit_chain(client: httpx.Client, operator: dict[str, str], seat: str, deadline: float,
                samples: list[float]) -> None:
    """Admissions of `seat`, each replacing the last, until the deadline."""
    previous = None
    while time.monotonic() < deadline:
        start = time.perf_counter()
        resp = client.post(f"/v1/seats/{seat}/executions", headers=operator, json={
            "swarm": "bench", "runtime_backend": "local", "previous_execution_id": previous})
        resp.raise_for_status()
        samples.append(time.perf_counter() - start)
        previous = resp.json()["execution_id"]


def measure(connect, operator: dict[str, str], clients: int, seconds: float, label: str) -> list[object]:
    def work(n: int, deadline: float, samples: list[float]) -> None:
        with connect() as client:
            admit_chain(client, operator, f"bench-{label}-{clients}-{n}", deadline, samples)

    return concurrent_rate(clients, seconds, work)


def run_against(url: str, password: str, seconds: float, counts: list[int]) -> list[list[object]]:
    def connect() -> httpx.Client:
        return httpx.Client(base_url=url, timeout=120)

    with connect() as client:
        backend = client.get("/health").json()["database"]
        operator = Operator(client, password=password).headers
    label = f"{int(time.time())}"  # fresh seat names on a server that may hold earlier runs
    return [[backend, *measure(connect, operator, n, seconds, label)] for n in counts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5, help="measured time per row")
    parser.add_argument("--clients", default="1,8", help="concurrent clients per row, comma-separated")
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--url", help="benchmark this running server instead of starting one per backend")
    parser.add_argument("--password", default=ADMIN_PASSWORD, help="the operator password (with --url)")
    args = parser.parse_args()
    counts = [int(n) for n in args.clients.split(",")]
    rows = []
    if args.url:
        rows += run_against(args.url, args.password, args.seconds, counts)
    else:
        for backend in args.backends.split(","):
            with Server(backend) as server:
                rows += run_against(server.url, ADMIN_PASSWORD, args.seconds, counts)
    print(table(["db", "clients", "admissions", "per s", "p50 ms", "p99 ms"], rows))
    print("(an admission: one POST /v1/seats/{seat}/executions replacing the seat's current execution)")


if __name__ == "__main__":
    main()
