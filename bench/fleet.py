"""A fleet against one server on a throw-away PostgreSQL database: idle workers each holding a
waiting claim (`wait_seconds`), plus busy agents heartbeating the attempts they run.

Prints the idle fleet's cost (the server's CPU, % of one core, read from /proc over a window
when only the idle fleet is connected), how soon a waiting claim is answered after a run is
created (p50/p99, from the moment POST /v1/runs is sent to the claim's answer), the busy
agents' heartbeat latency (p50/p99) while the fleet waits and runs are created, and errors.
The server runs `fenceline serve --workers 2` where this build has that option, else one
process (the output says which). Run: python bench/fleet.py [--idle 1000] [--busy 100]; the
idle renewals alone, say: python bench/fleet.py --idle 300 --busy 0 --runs 0 --claim-wait 5 --workers 1."""

import argparse
import asyncio
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.execution.schemas import MAX_CLAIM_WAIT_SECONDS  # noqa: E402
from bench.common import ADMIN_PASSWORD, Server, cpu_seconds, percentile, table  # noqa: E402

CLAIM_WAIT = MAX_CLAIM_WAIT_SECONDS  # the longest wait the server allows: an idle worker asks once per wait
HEARTBEAT_INTERVAL = 3.0  # under uvicorn's 5 s keep-alive, so a heartbeat never races a closing connection


def serve_workers_option() -> bool:
    """Whether `fenceline serve` takes --workers in this build."""
    help_text = subprocess.run([sys.executable, "-m", "app.cli", "serve", "--help"], capture_output=True,
                               text=True, cwd=Path(__file__).resolve().parent.parent).stdout
    return "--workers" in help_text


def process_tree_cpu_seconds(pid: int) -> float:
    """User + system CPU of `pid` and of every process below it (uvicorn's worker processes)."""
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        try:
            total += cpu_seconds(current)
            for task in Path(f"/proc/{current}/task").iterdir():
                stack += [int(child) for child in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


@dataclass
class Figures:
    errors: list[str] = field(default_factory=list)
    claim_latency: list[float] = field(default_factory=list)
    heartbeats: list[float] = field(default_factory=list)
    created_at: dict[str, float] = field(default_factory=dict)  # run_id -> when POST /v1/runs was sent
    creations: list[float] = field(default_factory=list)  # how long each POST /v1/runs took
    claims: int = 0


async def admit(http: httpx.AsyncClient, operator: dict[str, str], seats: list[str]) -> list[dict[str, str]]:
    gate = asyncio.Semaphore(16)

    async def one(seat: str) -> dict[str, str]:
        async with gate:
            resp = await http.post(f"/v1/seats/{seat}/executions", headers=operator,
                                   json={"swarm": "fleet", "runtime_backend": "local"})
            resp.raise_for_status()
            return {"Authorization": f"Bearer {resp.json()['worker_token']}"}

    return list(await asyncio.gather(*(one(seat) for seat in seats)))


def connection(url: str) -> httpx.AsyncClient:
    """One client per simulated worker, as on a real fleet (and a pool of one connection: httpx
    scans its pool on every request, which with a thousand waiting requests in one pool costs the
    load generator more than the server)."""
    return httpx.AsyncClient(base_url=url, verify=False, timeout=httpx.Timeout(CLAIM_WAIT + 60, connect=30))


async def idle_worker(url: str, worker: dict[str, str], figures: Figures, stop: asyncio.Event,
                      start_after: float, claim_wait: float) -> None:
    """Waiting claims until told to stop; a claimed task is reported done at once."""
    await asyncio.sleep(start_after)  # spread the fleet's renewals over the wait
    async with connection(url) as http:
        await _idle(http, worker, figures, stop, claim_wait)


async def _idle(http: httpx.AsyncClient, worker: dict[str, str], figures: Figures, stop: asyncio.Event,
                claim_wait: float) -> None:
    while not stop.is_set():
        try:
            resp = await http.post("/v1/dispatch/claim", headers=worker,
                                   json={"limit": 1, "wait_seconds": claim_wait})
            answered = time.perf_counter()
            resp.raise_for_status()
            figures.claims += 1
            for item in resp.json()["items"]:
                figures.claim_latency.append(answered - figures.created_at[item["correlation"]["run_id"]])
                token = {"Authorization": f"Bearer {item['attempt_token']}"}
                for state in ("running", "success"):
                    (await http.post("/v1/attempts/report", headers=token, json={"state": state})).raise_for_status()
        except httpx.HTTPError as exc:
            if not stop.is_set():
                figures.errors.append(f"idle claim: {exc!r}")
                await asyncio.sleep(1)


async def busy_agent(url: str, attempt_token: str, figures: Figures, stop: asyncio.Event,
                     start_after: float) -> None:
    """Heartbeats of one running attempt, every HEARTBEAT_INTERVAL, until told to stop."""
    token = {"Authorization": f"Bearer {attempt_token}"}
    await asyncio.sleep(start_after)  # agents started at different times, as they do
    async with connection(url) as http:
        while not stop.is_set():
            start = time.perf_counter()
            try:
                resp = await http.post("/v1/attempts/heartbeat", headers=token)
                figures.heartbeats.append(time.perf_counter() - start)
                if resp.status_code != 200:
                    figures.errors.append(f"heartbeat: {resp.status_code} {resp.text[:300]}")
            except httpx.HTTPError as exc:
                figures.errors.append(f"heartbeat: {exc!r}")
            await asyncio.sleep(max(0.0, HEARTBEAT_INTERVAL - (time.perf_counter() - start)))


async def fleet(server: Server, idle: int, busy: int, idle_seconds: float, runs: int,
                tasks_per_run: int, claim_wait: float) -> dict[str, object]:
    figures = Figures()
    async with connection(server.url) as http:
        resp = await http.post("/auth/token", json={"username": "admin", "password": ADMIN_PASSWORD})
        operator = {"Authorization": f"Bearer {resp.json()['access_token']}"}
        note("admitting the fleet")
        idle_workers = await admit(http, operator, [f"idle-{n}" for n in range(idle)])
        busy_workers = await admit(http, operator, [f"busy-{n}" for n in range(busy)])
        # The busy agents' attempts are claimed before the idle fleet waits, so that it cannot take them.
        if busy:
            (await http.post("/v1/runs", headers=operator, json={"dag_id": "busy", "run_id": "busy", "tasks": [
                {"task_id": f"t{n}", "payload": {"command": ["sleep", "3600"]}} for n in range(busy)]})
             ).raise_for_status()
        note("the busy agents claim their attempts")
        busy_tokens = []
        for worker in busy_workers:
            (item,) = (await http.post("/v1/dispatch/claim", headers=worker, json={"limit": 1})).json()["items"]
            (await http.post("/v1/attempts/report", headers={"Authorization": f"Bearer {item['attempt_token']}"},
                             json={"state": "running"})).raise_for_status()
            busy_tokens.append(item["attempt_token"])

        note("the idle fleet starts waiting")
        stop = asyncio.Event()
        spread = min(claim_wait, idle_seconds) / max(1, idle)
        idle_tasks = [asyncio.create_task(idle_worker(server.url, w, figures, stop, n * spread, claim_wait))
                      for n, w in enumerate(idle_workers)]
        await asyncio.sleep(min(claim_wait, idle_seconds) + 2)  # every idle worker is waiting
        cpu_before, wall_before = process_tree_cpu_seconds(server.process.pid), time.monotonic()
        idle_claims_before = figures.claims
        await asyncio.sleep(idle_seconds)
        idle_cpu_seconds = process_tree_cpu_seconds(server.process.pid) - cpu_before
        idle_cpu = idle_cpu_seconds / (time.monotonic() - wall_before)
        idle_claims = figures.claims - idle_claims_before

        note("busy agents heartbeat; runs are created")
        busy_tasks = [asyncio.create_task(busy_agent(server.url, token, figures, stop, n * HEARTBEAT_INTERVAL / busy))
                      for n, token in enumerate(busy_tokens)]
        await asyncio.sleep(HEARTBEAT_INTERVAL)
        for n in range(runs):
            run_id = f"fleet-{n}"
            figures.created_at[run_id] = time.perf_counter()
            (await http.post("/v1/runs", headers=operator, json={"dag_id": "fleet", "run_id": run_id, "tasks": [
                {"task_id": f"t{i}", "payload": {"command": ["true"]}} for i in range(tasks_per_run)]})
             ).raise_for_status()
            figures.creations.append(time.perf_counter() - figures.created_at[run_id])
            await asyncio.sleep(0.5)
        deadline = time.monotonic() + 30
        while len(figures.claim_latency) < runs * tasks_per_run and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        stop.set()
        for task in busy_tasks:
            await task
        for task in idle_tasks:
            task.cancel()
        await asyncio.gather(*idle_tasks, return_exceptions=True)
    unclaimed = runs * tasks_per_run - len(figures.claim_latency)
    if unclaimed:
        figures.errors.append(f"{unclaimed} tasks were not claimed within 30 s")
    return {
        "idle": idle, "busy": busy, "idle CPU % of a core": 100 * idle_cpu,
        "idle claims answered": idle_claims,
        "idle CPU ms per claim": 1000 * idle_cpu_seconds / idle_claims if idle_claims else float("nan"),
        "run creation p50 ms": ms(figures.creations, 0.5), "run creation p99 ms": ms(figures.creations, 0.99),
        "claim p50 ms": ms(figures.claim_latency, 0.5), "claim p99 ms": ms(figures.claim_latency, 0.99),
        "heartbeat p50 ms": ms(figures.heartbeats, 0.5), "heartbeat p99 ms": ms(figures.heartbeats, 0.99),
        "errors": len(figures.errors), "first errors": figures.errors[:3],
    }


def ms(samples: list[float], q: float) -> float:
    """The q-quantile of `samples` (seconds) in milliseconds; NaN when there are none."""
    return 1000 * percentile(samples, q) if samples else float("nan")


def note(what: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {what}", file=sys.stderr, flush=True)


def raise_open_files(needed: int) -> None:
    """Each waiting claim holds a socket in this process (and one in the server's)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(needed, soft)), hard))


def run(idle: int = 1000, busy: int = 100, idle_seconds: float = 30.0, runs: int = 20, tasks_per_run: int = 10,
        backend: str = "postgresql", claim_wait: float = CLAIM_WAIT, workers: int = 2) -> dict[str, object]:
    """The fleet's figures, against a fresh server and database."""
    raise_open_files(2 * (idle + busy) + 1000)
    option = serve_workers_option()
    workers = workers if option and backend == "postgresql" else 1
    # Always said: unsaid, `serve` runs as many processes as there are cores on PostgreSQL.
    args = ["--workers", str(workers)] if option else []
    with Server(backend, *args) as server:
        figures = asyncio.run(fleet(server, idle, busy, idle_seconds, runs, tasks_per_run, claim_wait))
    return {"server processes": workers, **figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--idle", type=int, default=1000, help="idle workers, each holding a waiting claim")
    parser.add_argument("--busy", type=int, default=100, help="busy agents, each heartbeating one attempt")
    parser.add_argument("--idle-seconds", type=float, default=30, help="the window the idle fleet's CPU is read over")
    parser.add_argument("--runs", type=int, default=20, help="runs created while the fleet waits, 0.5 s apart")
    parser.add_argument("--tasks-per-run", type=int, default=10)
    parser.add_argument("--backend", default="postgresql", choices=["postgresql", "sqlite"])
    parser.add_argument("--claim-wait", type=float, default=CLAIM_WAIT, help="each idle claim's wait_seconds")
    parser.add_argument("--workers", type=int, default=2, help="server processes (PostgreSQL only; SQLite: 1)")
    args = parser.parse_args()
    figures = run(args.idle, args.busy, args.idle_seconds, args.runs, args.tasks_per_run, args.backend,
                  args.claim_wait, args.workers)
    errors = figures.pop("first errors")
    print(table(["figure", "value"], [[name, value] for name, value in figures.items()]))
    if not serve_workers_option():
        print("(one server process: `fenceline serve --workers` does not exist in this build)")
    for error in errors:
        print("error:", error)


if __name__ == "__main__":
    main()
