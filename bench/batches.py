"""Fleet capacity through batches (POST /v1/attempts/batch) against one server process
(`fenceline serve --workers 1`) on a throw-away PostgreSQL database.

Simulated workers each hold `--per-worker` running attempts (claimed and reported `running`
through batches) and heartbeat all of them every `--interval` seconds in one batch, the workers
spread evenly over the interval. For each fleet size it prints the heartbeats per second, the
server's CPU (% of one core, from /proc over the measured window), PostgreSQL's, the batch
answers' p50/p99/max, the errors, the server's resident memory at the end, its garbage
collector's pauses over the window (full collections, and all of them: count and total ms, from
its fenceline_gc_pause_seconds; blank for a build without it) and the machine's load average
(1 min) at the window's start and end. The capacity is the largest fleet whose server
stays under 70 % of a core with p99 under 100 ms.

    python bench/batches.py [--attempts 10000,20000,30000] [--per-worker 500] [--interval 5] [--seconds 20]
"""

import argparse
import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import Server, admit, percentile, postgres_cpu_seconds, table  # noqa: E402
from bench.load import Connection  # noqa: E402
from bench.roundtrips import create_runs  # noqa: E402

HEADERS = ["running attempts", "workers", "heartbeats/s", "server CPU % of a core", "PostgreSQL CPU %",
           "batch p50 ms", "batch p99 ms", "batch max ms", "errors", "server CPU µs / heartbeat", "server RSS MB",
           "full GCs", "full GC ms", "GCs", "GC ms", "load average", "fits (<70 %, p99<100 ms)"]
MAX_ENTRIES = 500


GC_SERIES = re.compile(rb'^fenceline_gc_pause_seconds_(sum|count)\{generation="(\d)"\} (\S+)$', re.M)


def gc_pauses(client, operator: dict[str, str]) -> dict[tuple[str, str], float]:
    """The server's garbage-collector pauses so far, {(sum|count, generation): value}: empty
    for a build without the metric."""
    body = client.get("/metrics", headers=operator).content
    return {(kind.decode(), gen.decode()): float(value) for kind, gen, value in GC_SERIES.findall(body)}


def claim_running(client, worker: dict[str, str], count: int) -> list[str]:
    """`count` attempts claimed by `worker` and reported running through batches: their tokens."""
    tokens: list[str] = []
    while len(tokens) < count:
        resp = client.post("/v1/dispatch/claim", headers=worker, json={"limit": min(100, count - len(tokens))})
        resp.raise_for_status()
        items = resp.json()["items"]
        if not items:
            raise RuntimeError("ran out of ready tasks")
        tokens += [i["attempt_token"] for i in items]
    for n in range(0, count, MAX_ENTRIES):
        resp = client.post("/v1/attempts/batch", headers=worker, timeout=120, json={"entries": [
            {"attempt_token": t, "op": "report", "state": "running"} for t in tokens[n:n + MAX_ENTRIES]]})
        resp.raise_for_status()
        assert {r["status"] for r in resp.json()["results"]} == {200}
    return tokens


async def heartbeating(url: str, worker: dict[str, str], tokens: list[str], offset: float, interval: float,
                       deadline: float, samples: list[tuple[float, int]], errors: list[int]) -> None:
    """One worker: a batch of every one of its attempts' heartbeats per interval, from `offset`.
    Each body is encoded once, before its requests are timed, as a worker would encode it: 300 KB
    of JSON encoded in the load generator's one event loop counted in the answer's time."""
    chunks = [tokens[n:n + MAX_ENTRIES] for n in range(0, len(tokens), MAX_ENTRIES)]
    bodies = [(json.dumps({"entries": [{"attempt_token": t, "op": "heartbeat"} for t in chunk]}).encode(), len(chunk))
              for chunk in chunks]
    async with Connection(url) as http:
        await asyncio.sleep(offset)
        next_at = time.monotonic()
        while next_at < deadline:
            for body, size in bodies:
                start = time.perf_counter()
                status, data = await http.request("POST", "/v1/attempts/batch", body, worker)
                samples.append((time.perf_counter() - start, size))
                if status != 200 or b'"status":409' in data:
                    errors.append(status)
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))


async def fleet(url: str, workers: list[tuple[dict[str, str], list[str]]], interval: float,
                seconds: float) -> tuple[list[tuple[float, int]], list[int]]:
    samples: list[tuple[float, int]] = []
    errors: list[int] = []
    deadline = time.monotonic() + seconds
    await asyncio.gather(*(heartbeating(url, w, tokens, n * interval / len(workers), interval, deadline, samples,
                                        errors) for n, (w, tokens) in enumerate(workers)))
    return samples, errors


def measure(attempts: int, per_worker: int, interval: float, seconds: float) -> list[object]:
    with Server("postgresql", "--workers", "1", agent_lost_after_seconds="3600") as server, \
            server.client() as client:
        operator = server.operator(client)
        client.patch("/v1/pools/default_pool", headers=operator, json={"slots": attempts + 1}).raise_for_status()
        create_runs(client, operator, attempts)
        workers = []
        for n in range(0, attempts, per_worker):
            worker = admit(client, operator, f"fleet-{n // per_worker}")
            workers.append((worker, claim_running(client, worker, min(per_worker, attempts - n))))
        asyncio.run(fleet(server.url, workers, interval, interval))  # one round to warm up
        gc_before = gc_pauses(client, operator)
        before, load_before = (server.cpu_seconds(), postgres_cpu_seconds()), os.getloadavg()[0]
        started = time.perf_counter()
        samples, errors = asyncio.run(fleet(server.url, workers, interval, seconds))
        elapsed = time.perf_counter() - started
        server_cpu, pg_cpu = server.cpu_seconds() - before[0], postgres_cpu_seconds() - before[1]
        rss = server.rss_bytes() / 2**20  # with every attempt's token verified and remembered
        gc_after = gc_pauses(client, operator)
    gc_delta = {key: value - gc_before.get(key, 0.0) for key, value in gc_after.items()}

    def gcs(kind: str, generations: str) -> object:
        if not gc_delta:
            return ""
        total = sum(gc_delta[(kind, g)] for g in generations)
        return int(total) if kind == "count" else 1000 * total
    beats = sum(n for _, n in samples)
    latencies = [latency for latency, _ in samples]
    p99 = 1000 * percentile(latencies, 0.99)
    load = 100 * server_cpu / elapsed
    return [attempts, len(workers), beats / elapsed, load, 100 * pg_cpu / elapsed, 1000 * percentile(latencies, 0.5),
            p99, 1000 * max(latencies), len(errors), 1e6 * server_cpu / max(1, beats), rss,
            gcs("count", "2"), gcs("sum", "2"), gcs("count", "012"), gcs("sum", "012"),
            f"{load_before:.1f}-{os.getloadavg()[0]:.1f}",
            "yes" if load < 70 and p99 < 100 else "no"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attempts", default="10000,20000,30000", help="fleet sizes, comma-separated")
    parser.add_argument("--per-worker", type=int, default=500, help="running attempts per simulated worker")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between a worker's heartbeats")
    parser.add_argument("--seconds", type=float, default=20.0, help="the measured window")
    args = parser.parse_args()
    rows = [measure(int(a), args.per_worker, args.interval, args.seconds) for a in args.attempts.split(",")]
    print(table(HEADERS, rows))


if __name__ == "__main__":
    main()
