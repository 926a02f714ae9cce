"""Short tasks end to end: two real `fenceline worker --concurrency 32` processes running `true`
against `fenceline serve --workers 2` on a throw-away PostgreSQL database.

Prints tasks per second from the workers' start until the last task succeeded (the start-up of
two worker processes included), and once running (from the first task's start to the last
one's end, as the database stamped them), the server's and
PostgreSQL's CPU per task over that window (claim, running, the log line, success; PostgreSQL's
of the backends connected to the bench's database only, as other sessions may share the
server), the workers' CPU per task, and the requests per task by kind, with
the workers batching (`--batch-tick 0.05`, the default) and without (`--batch-tick 0`).

    python bench/short_tasks.py [--tasks 6000] [--concurrency 32] [--ticks 0.05,0] [--rounds 1]
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ADMIN_PASSWORD, PostgresCpu, Server, table  # noqa: E402
from bench.roundtrips import create_runs  # noqa: E402

HEADERS = ["worker --batch-tick", "tasks", "tasks/s", "tasks/s once running", "server CPU ms / task",
           "PostgreSQL CPU ms / task", "server + PostgreSQL ms / task", "workers' CPU ms / task", "tasks / claim",
           "entries / batch", "other requests / task"]


def children_cpu() -> float:
    usage = os.times()
    return usage.children_user + usage.children_system


DONE = text("SELECT count(*), min(started_at), max(ended_at) FROM task_instances WHERE state = 'success'")


def succeeded(database_url: str) -> tuple[int, datetime | None, datetime | None]:
    """Tasks done, the first one's start and the last one's end, asked of the database itself:
    the server's CPU is the figure, and reading a 1,000-task run through the API every second
    cost it as much as a tenth of the tasks' work. The times are the database's own stamps, so
    the rate does not depend on how often this asks."""
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return tuple(conn.execute(DONE).one())  # type: ignore[return-value]
    finally:
        engine.dispose()


def measure(tasks: int, concurrency: int, tick: str) -> list[object]:
    with Server("postgresql", "--workers", "2") as server, server.client() as client, \
            tempfile.TemporaryDirectory(prefix="fenceline-bench-workers-") as state:
        operator = server.operator(client)
        client.patch("/v1/pools/default_pool", headers=operator, json={"slots": 4 * concurrency}).raise_for_status()
        create_runs(client, operator, tasks)
        env = {**os.environ, "FENCELINE_ADMIN_PASSWORD": ADMIN_PASSWORD}
        database = urlsplit(server.database_url).path.lstrip("/")
        before = server.cpu_seconds(), PostgresCpu(database).start(), children_cpu(), requests(client, operator)
        started = datetime.now(UTC)
        workers = [subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker", "--server", server.url, "--seat", f"short-{n}",
             "--state-dir", f"{state}/{n}", "--concurrency", str(concurrency), "--batch-tick", tick,
             "--claim-wait", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for n in range(2)]
        try:
            while (done := succeeded(server.database_url))[0] < tasks:
                time.sleep(1.0)
            server_cpu, pg_cpu = server.cpu_seconds() - before[0], before[1].stop()
            _, first_start, last_end = done
        finally:
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.wait(timeout=60)
        workers_cpu = children_cpu() - before[2]
        made = requests(client, operator) - before[3]
    return [tick, tasks, tasks / (last_end - started).total_seconds(), tasks / (last_end - first_start).total_seconds(),
            1000 * server_cpu / tasks, 1000 * pg_cpu / tasks,
            1000 * (server_cpu + pg_cpu) / tasks, 1000 * workers_cpu / tasks,
            tasks / made[CLAIM] if made[CLAIM] else "-", made[ENTRIES] / made[BATCH] if made[BATCH] else "-",
            (sum(made.values()) - made[CLAIM] - made[BATCH] - made[ENTRIES]) / tasks]


CLAIM, BATCH, ENTRIES = "/v1/dispatch/claim", "/v1/attempts/batch", "entries"


def requests(client: httpx.Client, operator: dict[str, str]) -> Counter[str]:
    """Requests the server answered so far, by route (its /metrics), the workers' and this one's,
    and the entries of its batches (ENTRIES)."""
    made: Counter[str] = Counter()
    for family in text_string_to_metric_families(client.get("/metrics", headers=operator).text):
        for sample in family.samples:
            if sample.name == "fenceline_http_requests_total":
                made[sample.labels["route"]] += sample.value
            elif sample.name == "fenceline_batch_entries_total":
                made[ENTRIES] += sample.value
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=6000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--ticks", default="0.05,0", help="the workers' --batch-tick per row, comma-separated")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rows per tick, the ticks taking turns (the machine is noisy)")
    args = parser.parse_args()
    ticks = args.ticks.split(",")
    print(table(HEADERS, [measure(args.tasks, args.concurrency, tick) for _ in range(args.rounds) for tick in ticks]))


if __name__ == "__main__":
    main()
