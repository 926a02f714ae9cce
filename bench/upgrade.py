"""A rolling-upgrade drill (contract 10; docs/upgrades.md): two `fenceline serve` replicas on one
throw-away PostgreSQL database behind a round-robin balancer, several `fenceline worker`
processes running short tasks through it, and each replica restarted in turn: on a
next-release copy of the source tree carrying one more expand-only migration (applied first by
its `fenceline migrate`, while this release's replicas serve), then back on this release (a
rollback within the window, no down migration). A replica leaves the balancer's rotation
before its SIGTERM, as a Pod leaves a Service's endpoints during its preStop sleep.

Runs of short tasks are created through the balancer all along the restarts. Prints the
requests the replicas answered by status (their access logs), the calls repeated, the tasks
settled, run twice (doubled) and never run (lost), each restart's drain, and
the drain of a replica holding 200 waiting claims.

    python bench/upgrade.py [--per-run 10] [--every 0.5] [--workers 3] [--concurrency 8] [--waiting 200]
"""

import argparse
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ADMIN_PASSWORD, admit, table  # noqa: E402
from tests.support.api import Operator  # noqa: E402
from tests.support.databases import throwaway_database  # noqa: E402
from tests.support.releases import SOURCE, database_env, next_release, release_command, run_release  # noqa: E402
from tests.support.servers import Served  # noqa: E402
from tests.support.tcp_proxy import shut_both  # noqa: E402

ACCESS = re.compile(r"fenceline\.access (\S+) (\S+) (\d{3}) ")


class Balancer:
    """Round robin over the replicas in rotation, a connection at a time (a Service's
    endpoints): a connection stays with the replica it was given until either side closes it."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.rotation: dict[str, int] = {}
        self.turn = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            ports = list(self.rotation.values())
            if not ports:
                client.close()
                continue
            self.turn += 1
            try:
                upstream = socket.create_connection(("127.0.0.1", ports[self.turn % len(ports)]))
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        shut_both(src, dst)


class Replica:
    """One `fenceline serve --no-migrate` of a release (None: this one), its access logs kept
    across restarts."""

    def __init__(self, name: str, env: dict[str, str], balancer: Balancer) -> None:
        self.name, self.env, self.balancer = name, env, balancer
        self.lines: list[str] = []
        self.served: Served | None = None
        self.drains: list[list[object]] = []

    def start(self, release: Path | None, label: str) -> None:
        root = release or SOURCE
        self.served = Served(root, self.env, "--no-migrate", "--workers", "1", command=release_command(root))
        self.served.wait_healthy(200)
        httpx.get(f"{self.served.url}/health/ready", timeout=30).raise_for_status()
        self.label = label
        self.balancer.rotation[self.name] = self.served.port

    def stop(self) -> None:
        """Out of rotation, then SIGTERM; the drain's figures kept."""
        assert self.served is not None
        self.balancer.rotation.pop(self.name, None)
        time.sleep(1.0)  # the preStop sleep: connections already given finish what they started
        began = time.monotonic()
        self.served.process.send_signal(signal.SIGTERM)
        status = self.served.process.wait(timeout=60)
        self.drains.append([f"{self.name} ({self.label})", status, f"{time.monotonic() - began:.2f}"])
        self.lines += self.served.lines
        self.served = None

    def statuses(self) -> Counter[tuple[str, str]]:
        """Requests answered, by status and route (a 503 or a 409 by its route, the rest as one)."""
        found: Counter[tuple[str, str]] = Counter()
        for line in self.lines + (self.served.lines if self.served else []):
            for match in ACCESS.finditer(line):
                status = match.group(3)
                found[(status, match.group(2) if status in ("503", "409") else "*")] += 1
        return found


class Feeder:
    """Runs of short tasks created through the balancer every `every` seconds until stopped,
    each task appending its task instance's id to `ran` (a task run twice shows twice). A
    create that met a restart is repeated; a repeat the first try had created answers 409."""

    def __init__(self, url: str, operator: dict[str, str], ran: Path, per_run: int, every: float) -> None:
        self.url, self.operator, self.ran, self.per_run, self.every = url, operator, ran, per_run, every
        self.created, self.repeated, self.stop = 0, 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        command = ["sh", "-c", f'echo "$FENCELINE_TI_ID" >> {self.ran}; sleep 0.1']
        n = 0
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while not self.stop.wait(self.every):
                body = {"dag_id": "upgrade", "run_id": f"r{n:06}", "tasks": [
                    {"task_id": f"t{i}", "payload": {"command": command}} for i in range(self.per_run)]}
                while True:
                    try:
                        status = client.post("/v1/runs", headers=self.operator, json=body).status_code
                    except httpx.TransportError:
                        status = 0
                    if status in (201, 409):
                        break
                    self.repeated += 1
                    time.sleep(0.2)
                self.created += self.per_run
                n += 1


def settled(url: str) -> Counter[str]:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return Counter(dict(conn.execute(text("SELECT state, count(*) FROM task_instances GROUP BY state")).all()))
    finally:
        engine.dispose()


def drain_waiting(replica: Replica, client: httpx.Client, operator: dict[str, str], waiting: int) -> list[object]:
    """`waiting` claims waiting on `replica` (directly), then its SIGTERM: how long until every
    one was answered, and how."""
    assert replica.served is not None
    url = replica.served.url
    workers = [admit(client, operator, f"idle-{n}") for n in range(waiting)]

    def claim(worker: dict[str, str]) -> tuple[int, float]:
        with httpx.Client(base_url=url, timeout=60) as own:
            resp = own.post("/v1/dispatch/claim", json={"limit": 1, "wait_seconds": 25}, headers=worker)
        return resp.status_code, time.monotonic()

    with ThreadPoolExecutor(waiting) as pool:
        answers = [pool.submit(claim, w) for w in workers]
        deadline = time.monotonic() + 60
        while in_flight(url, operator) < waiting and time.monotonic() < deadline:
            time.sleep(0.1)
        replica.balancer.rotation.pop(replica.name, None)
        began = time.monotonic()
        replica.served.process.send_signal(signal.SIGTERM)
        done = [a.result() for a in answers]
        status = replica.served.process.wait(timeout=60)
    replica.lines += replica.served.lines
    replica.served = None
    return [waiting, f"{max(at for _, at in done) - began:.2f}", dict(Counter(s for s, _ in done)), status]


def in_flight(url: str, operator: dict[str, str]) -> float:
    text_ = httpx.get(f"{url}/metrics", headers=operator, timeout=10).text
    found = re.search(r"^fenceline_claims_in_flight (\S+)$", text_, re.M)
    return float(found.group(1)) if found else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-run", type=int, default=10, help="tasks in each run the feeder creates")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between two runs created")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--waiting", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fenceline-upgrade-") as tmp, \
            throwaway_database("postgresql", prefix="fenceline_bench") as url:
        tmp_path, ran = Path(tmp), Path(tmp) / "ran"
        ran.touch()
        env = {**database_env(url, tmp_path / "data"), "FENCELINE_ADMIN_PASSWORD": ADMIN_PASSWORD,
               "FENCELINE_JWT_SECRET": "bench-secret-" + "x" * 40, "FENCELINE_DATABASE_POOL_SIZE": "10"}
        assert run_release(None, "migrate", env=env).returncode == 0
        balancer = Balancer()
        replicas = [Replica(name, env, balancer) for name in ("a", "b")]
        for replica in replicas:
            replica.start(None, "this release")
        client = httpx.Client(base_url=balancer.url, timeout=60)
        operator = Operator(client).headers
        feeder = Feeder(balancer.url, operator, ran, args.per_run, args.every)
        feeder.thread.start()
        workers = [subprocess.Popen(
            [*release_command(SOURCE), "worker", "--server", balancer.url, "--seat", f"drill-{n}",
             "--state-dir", f"{tmp}/w{n}", "--concurrency", str(args.concurrency), "--claim-wait", "5"],
            env={**env, "FENCELINE_SERVER": balancer.url}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True) for n in range(args.workers)]
        worker_lines: list[str] = []
        for worker in workers:
            threading.Thread(target=lambda w=worker: worker_lines.extend(w.stdout), daemon=True).start()
        release = next_release(tmp_path, ("0099_next", True))
        steps = [("migrate", None), (release, "next release"), (None, "rolled back")]
        for target, label in steps:
            if target == "migrate":
                done = run_release(release, "migrate", env=env)
                print(f"next release's migrate: exit {done.returncode}: {done.stdout.strip()}")
                continue
            for replica in replicas:
                replica.stop()
                replica.start(target, label)  # type: ignore[arg-type]
        feeder.stop.set()
        feeder.thread.join()
        deadline = time.monotonic() + 120
        while settled(url)["success"] < feeder.created and time.monotonic() < deadline:
            time.sleep(1)
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        worker_exits = [w.wait(timeout=60) for w in workers]
        drained = drain_waiting(replicas[0], client, operator, args.waiting)
        replicas[1].stop()
        states, tasks = settled(url), feeder.created
        runs = Counter(ran.read_text().split())
        statuses = sum((r.statuses() for r in replicas), Counter())
        retried = sum(1 for line in worker_lines if "retrying" in line)
        print(table(["status", "route", "requests"], [[*k, v] for k, v in sorted(statuses.items())]))
        print(table(["replica drained", "exit", "seconds from SIGTERM to exit"],
                    [d for r in replicas for d in r.drains]))
        print(table(["tasks", "settled (success)", "other states", "run twice", "never run", "run creates repeated",
                     "worker retry lines", "worker exits"],
                    [[tasks, states["success"], dict(states - Counter(success=states["success"])),
                      sum(1 for n in runs.values() if n > 1), tasks - len(runs), feeder.repeated, retried,
                      worker_exits]]))
        print(table(["waiting claims", "all answered within s of SIGTERM", "answers", "exit"], [drained]))
        print("figures from a loaded shared machine (2 cores, other sessions running)")


if __name__ == "__main__":
    main()
