"""Fleet capacity through batches (POST /v1/attempts/batch) against one server process
(`fenceline serve --workers 1`) on a throw-away PostgreSQL database.

Simulated workers each hold `--per-worker` running attempts (claimed and reported `running`
through batches) and heartbeat all of them every `--interval` seconds in one batch, the workers
spread evenly over the interval. For each fleet size it prints the heartbeats per second, the
server's CPU (% of one core, from /proc over the measured window), PostgreSQL's (the backends of
the bench's database: other sessions share the server), the batch answers' p50/p99/max, the
errors, the server's resident memory at the end, its garbage collector's pauses over the window
(full collections, and all of them: count and total ms, from its fenceline_gc_pause_seconds;
blank for a build without it) and the machine's load average (1 min) at the window's start and
end. The rates are over the window: no worker waits for a round past its end. The capacity is
the largest fleet whose server stays under 70 % of a core with p99 under 100 ms.

What tells the server's time from the client's: the batches' p50/p99 as the server timed them
(its access log, from a request's head to its answer's end), the client's own CPU (% of a
core: a fleet's agents run on other machines, this one shares the server's), and the batches
in flight when one was sent (more than one: they queue in the server's one process).
`--client-cpu N` pins this process to CPU N and the server to the others, so that the client
cannot take the server's cores (PostgreSQL's processes are left where the system runs them).
`--profile FILE` records the server over the window with py-spy (raw folded stacks).

    python bench/batches.py [--attempts 10000,20000,30000] [--per-worker 500] [--interval 5] [--seconds 20]
                            [--client-cpu N] [--profile FILE]
"""

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import PostgresCpu, Server, admit, percentile, table  # noqa: E402
from bench.load import Connection  # noqa: E402
from bench.roundtrips import create_runs  # noqa: E402

HEADERS = ["running attempts", "workers", "heartbeats/s", "server CPU % of a core", "PostgreSQL CPU %",
           "client CPU %", "batch p50 ms", "batch p99 ms", "batch max ms", "in server p50 ms", "in server p99 ms",
           "sent behind another %", "most in flight", "errors", "server CPU µs / heartbeat", "server RSS MB",
           "full GCs", "full GC ms", "GCs", "GC ms", "load average", "CPUs", "fits (<70 %, p99<100 ms)"]
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


# One batch as the client saw it: when it was sent (monotonic), how long its answer took, its entries.
Sample = tuple[float, float, int]


async def heartbeating(url: str, worker: dict[str, str], tokens: list[str], offset: float, interval: float,
                       deadline: float, samples: list[Sample], errors: list[int]) -> None:
    """One worker: a batch of every one of its attempts' heartbeats per interval, from `offset`,
    until the deadline (no sleep past it, so the window is the rate's). Each body is encoded
    once, before its requests are timed, as a worker would encode it: 300 KB of JSON encoded in
    the load generator's one event loop counted in the answer's time."""
    chunks = [tokens[n:n + MAX_ENTRIES] for n in range(0, len(tokens), MAX_ENTRIES)]
    bodies = [(json.dumps({"entries": [{"attempt_token": t, "op": "heartbeat"} for t in chunk]}).encode(), len(chunk))
              for chunk in chunks]
    async with Connection(url) as http:
        await asyncio.sleep(offset)
        next_at = time.monotonic()
        while next_at < deadline:
            for body, size in bodies:
                sent = time.monotonic()
                status, data = await http.request("POST", "/v1/attempts/batch", body, worker)
                samples.append((sent, time.monotonic() - sent, size))
                if status != 200 or b'"status":409' in data:
                    errors.append(status)
            next_at += interval
            if next_at < deadline:
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))


async def fleet(url: str, workers: list[tuple[dict[str, str], list[str]]], interval: float,
                seconds: float) -> tuple[list[Sample], list[int]]:
    samples: list[Sample] = []
    errors: list[int] = []
    deadline = time.monotonic() + seconds
    await asyncio.gather(*(heartbeating(url, w, tokens, n * interval / len(workers), interval, deadline, samples,
                                        errors) for n, (w, tokens) in enumerate(workers)))
    return samples, errors


def overlapping(samples: list[Sample]) -> tuple[float, int]:
    """The share of batches sent while another was still unanswered (%), and the most in
    flight at once: the batches' own queue in the one server process."""
    answered_at = sorted(sent + latency for sent, latency, _ in samples)
    behind, most, waiting = 0, 0, 0
    for n, (sent, _, _) in enumerate(sorted(samples)):
        while waiting < len(answered_at) and answered_at[waiting] <= sent:
            waiting += 1
        in_flight = n - waiting  # sent before this one and not yet answered
        behind += in_flight > 0
        most = max(most, in_flight + 1)
    return 100 * behind / max(1, len(samples)), most


ACCESS_LINE = re.compile(r"fenceline\.access POST /v1/attempts/batch 200 ([\d.]+)ms")


def server_times(lines: list[str]) -> list[float]:
    """The batches' times as the server's access log gives them (ms, head to answer's end)."""
    return [float(m.group(1)) for line in lines if (m := ACCESS_LINE.search(line))]


def pinned(server: Server, client_cpu: int | None, cpus: set[int]) -> str:
    """Pin this process to `client_cpu` and every thread of the server to the other CPUs of
    `cpus`; says where each runs."""
    if client_cpu is None:
        return ""
    others = cpus - {client_cpu}
    if client_cpu not in cpus or not others:
        raise SystemExit(f"--client-cpu {client_cpu}: this machine's CPUs are {sorted(cpus)}")
    for pid in server.pids():  # an affinity is a thread's own: each of the server's, and those it starts after
        for thread in Path(f"/proc/{pid}/task").iterdir():
            os.sched_setaffinity(int(thread.name), others)
    os.sched_setaffinity(0, {client_cpu})
    return f"client {client_cpu}, server {','.join(map(str, sorted(others)))}"


def profiling(pid: int, seconds: float, out: str | None) -> subprocess.Popen | None:
    """py-spy recording the server for `seconds` without pausing it (raw folded stacks to `out`)."""
    if out is None:
        return None
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen([str(spy), "record", "--pid", str(pid), "--duration", str(int(seconds)), "--nonblocking",
                             "--rate", "200", "--format", "raw", "--output", out], stdout=subprocess.DEVNULL)


def measure(attempts: int, args: argparse.Namespace) -> list[object]:
    per_worker, interval, seconds = args.per_worker, args.interval, args.seconds
    cpus = os.sched_getaffinity(0)
    # The access log at info: one line a request, the batches' server-side times.
    with Server("postgresql", "--workers", "1", "--log-level", "info", agent_lost_after_seconds="3600") as server, \
            server.client() as client:
        placement = pinned(server, args.client_cpu, cpus)
        operator = server.operator(client)
        client.patch("/v1/pools/default_pool", headers=operator, json={"slots": attempts + 1}).raise_for_status()
        create_runs(client, operator, attempts)
        workers = []
        for n in range(0, attempts, per_worker):
            worker = admit(client, operator, f"fleet-{n // per_worker}")
            workers.append((worker, claim_running(client, worker, min(per_worker, attempts - n))))
        asyncio.run(fleet(server.url, workers, interval, interval))  # one round to warm up
        gc_before = gc_pauses(client, operator)
        # PostgreSQL's CPU for this database's backends only: other sessions share the server.
        before, load_before = server.cpu_seconds(), os.getloadavg()[0]
        postgres = PostgresCpu(server.database_url.rsplit("/", 1)[1]).start()
        logged, client_before = len(server.served.lines), time.process_time()
        spy = profiling(server.process.pid, seconds, args.profile and f"{args.profile}.{attempts}")
        started = time.perf_counter()
        samples, errors = asyncio.run(fleet(server.url, workers, interval, seconds))
        elapsed = time.perf_counter() - started
        server_cpu, pg_cpu = server.cpu_seconds() - before, postgres.stop()
        client_cpu = time.process_time() - client_before
        rss = server.rss_bytes() / 2**20  # with every attempt's token verified and remembered
        gc_after = gc_pauses(client, operator)
        served = server_times(server.served.lines[logged:])
        if spy is not None:
            spy.wait()
    os.sched_setaffinity(0, cpus)
    gc_delta = {key: value - gc_before.get(key, 0.0) for key, value in gc_after.items()}

    def gcs(kind: str, generations: str) -> object:
        if not gc_delta:
            return ""
        total = sum(gc_delta[(kind, g)] for g in generations)
        return int(total) if kind == "count" else 1000 * total
    beats = sum(n for _, _, n in samples)
    latencies = [latency for _, latency, _ in samples]
    p99 = 1000 * percentile(latencies, 0.99)
    load = 100 * server_cpu / elapsed
    behind, most = overlapping(samples)
    return [attempts, len(workers), beats / elapsed, load, 100 * pg_cpu / elapsed, 100 * client_cpu / elapsed,
            1000 * percentile(latencies, 0.5), p99, 1000 * max(latencies),
            percentile(served, 0.5) if served else "", percentile(served, 0.99) if served else "",
            behind, most, len(errors), 1e6 * server_cpu / max(1, beats), rss,
            gcs("count", "2"), gcs("sum", "2"), gcs("count", "012"), gcs("sum", "012"),
            f"{load_before:.1f}-{os.getloadavg()[0]:.1f}", placement,
            "yes" if load < 70 and p99 < 100 else "no"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attempts", default="10000,20000,30000", help="fleet sizes, comma-separated")
    parser.add_argument("--per-worker", type=int, default=500, help="running attempts per simulated worker")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between a worker's heartbeats")
    parser.add_argument("--seconds", type=float, default=20.0, help="the measured window")
    parser.add_argument("--client-cpu", type=int, help="pin this process to this CPU and the server to the others")
    parser.add_argument("--profile", metavar="FILE", help="py-spy the server over the window: FILE.<attempts>")
    args = parser.parse_args()
    rows = [measure(int(a), args) for a in args.attempts.split(",")]
    print(table(HEADERS, rows))


if __name__ == "__main__":
    main()
