"""The figures of docs/performance.md: `python -m bench [--seconds 10] [--only …]`, one table
per figure.

Every figure runs against a real `fenceline serve` on a throw-away database (bench/common.py)
and carries the server's own CPU, read from /proc for the server and its worker processes,
over the figure's measured interval:

- roundtrips (bench/roundtrips.py): attempt round trips (claim, running, heartbeat, success) at
  16 agents on PostgreSQL with `--workers 1` and `--workers 2`: per second, p50/p99, server,
  PostgreSQL and load-generator CPU-ms per round trip;
- reads (bench/reads.py): GET …/tries, GET …/logs/1?full_content=true (JSON) and the heartbeat
  at concurrency 8, one server process, on SQLite and PostgreSQL;
- biglog: a 200 MB collapsed log (three epochs) read whole through /api/v2 JSON, NDJSON and
  /api/v1 text: MB/s and the server's resident-memory growth;
- fleet (bench/fleet.py): 1,000 idle workers holding waiting claims beside 100 busy agents;
- floors (bench/floors.py): what a request costs with none of fenceline in it (a bare route,
  a transaction in an ORM session or on a bare psycopg connection, in the threadpool or not);
- edges (bench/edges.py), run alone by `python -m bench edges`: the concurrent-writers soak
  (claims, batches, rails, sweeps and killed connections) for --seconds, its answers by status,
  the deadlocks the server ran again, and the audit of every settle.
"""

import argparse
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import edges, fleet, floors, reads, roundtrips  # noqa: E402
from bench.common import Server, admit, table  # noqa: E402

MB = 1024 * 1024
BIGLOG_HEADERS = ["figure", "MB/s", "seconds", "server CPU s", "note"]


def _fill_three_epochs(client: httpx.Client, operator: dict[str, str], megabytes: int) -> int:
    """One try whose log is three epochs of about megabytes/3 MB each: two re-placed, the last a
    success. Answers the bytes stored."""
    client.post("/v1/runs", headers=operator, json={"dag_id": "big", "run_id": "r", "tasks": [
        {"task_id": "big", "payload": {"command": ["true"]}, "max_infra_attempts": 5}]}).raise_for_status()
    worker = admit(client, operator, "big")
    line = "x" * 99 + "\n"
    chunk = line * (MB // len(line))
    stored = 0
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
        stored += offset
        client.post("/v1/attempts/report", json={"state": outcome, "reason": "evicted"},
                    headers=attempt).raise_for_status()
    return stored


def biglog(megabytes: int) -> list[list[object]]:
    rows = []
    with Server("postgresql", "--workers", "1", infra_backoff_base_seconds="0") as server, \
            server.client() as client:
        operator = server.operator(client)
        stored = _fill_three_epochs(client, operator, megabytes) / MB
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
            rows.append([f"{stored:.0f} MB log, 3 epochs, {name} (PostgreSQL)", size / MB / elapsed, elapsed, cpu,
                         f"{size / MB:.0f} MB sent (with the epochs' headers and the framing); "
                         f"server RSS growth {(rss[1] - rss[0]) / MB:.0f} MB"])
    return rows


def fleet_figures() -> list[list[object]]:
    """bench/fleet.py's defaults: its idle window is the claims' 30 s wait, whatever --seconds."""
    figures = fleet.run()
    return [[name, value] for name, value in figures.items()]


FIGURES = {
    "roundtrips": lambda a: (roundtrips.HEADERS, [roundtrips.measure(w, 16, a.seconds) for w in (1, 2)]),
    "reads": lambda a: (reads.HEADERS, [row for backend in ("sqlite", "postgresql")
                                        for row in reads.measure(backend, a.seconds, 8)]),
    "biglog": lambda a: (BIGLOG_HEADERS, biglog(a.log_mb)),
    "fleet": lambda a: (["figure", "value"], fleet_figures()),
    "floors": lambda a: (floors.HEADERS, floors.measure(a.seconds, 8)),
    "edges": lambda a: (edges.HEADERS, edges.measure(a.seconds, a.kill_every)),
}
# Figures a bare `python -m bench` leaves out: a soak, not a figure of the performance table.
ON_DEMAND = ("edges",)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("figures", nargs="*", metavar="figure",
                        help=f"figures to run (as --only): {', '.join(FIGURES)}")
    parser.add_argument("--seconds", type=float, default=10, help="measured time per figure")
    parser.add_argument("--log-mb", type=int, default=200)
    parser.add_argument("--kill-every", type=float, default=1.0,
                        help="edges: seconds between two database connections ended")
    parser.add_argument("--only", default=",".join(f for f in FIGURES if f not in ON_DEMAND),
                        help="figures to run, comma-separated")
    args = parser.parse_args()
    names = args.figures or args.only.split(",")
    if unknown := [name for name in names if name not in FIGURES]:
        parser.error(f"no figure {', '.join(unknown)}; the figures are {', '.join(FIGURES)}")
    for name in names:
        print(f"bench: {name} …", file=sys.stderr, flush=True)
        headers, rows = FIGURES[name](args)
        print(table(headers, rows), flush=True)


if __name__ == "__main__":
    main()
