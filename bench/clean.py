"""`fenceline db clean` while the service runs: its rate (rows deleted per second) and the claims'
latency meanwhile (issue 45; bench/growth.py calls measure_clean on the database it seeded).

`python -m bench.clean [--runs 500]` seeds a throw-away PostgreSQL database of its own (seed)
and measures it; measure_clean(url) measures any seeded one.
"""

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import APP_CLI, admit, database, percentile, table  # noqa: E402
from tests.support.api import ADMIN_PASSWORD, Operator, json_of, task  # noqa: E402
from tests.support.servers import Served  # noqa: E402

HEADERS = ["phase", "claims", "claim p50 ms", "claim p99 ms", "rows", "rows/s", "seconds"]


def seed(url: str, runs: int, tasks_per_run: int = 10, days_ago: float = 60) -> int:
    """`runs` finished runs of `tasks_per_run` succeeded task instances, each with one attempt
    record and one archived try, that ended `days_ago` days ago; answers the task instances made."""
    from sqlalchemy import insert

    from app.db.engine import make_engine
    from app.db.types import utcnow
    from app.execution.models import TaskAttempt
    from app.orchestration.models import DagRun, TaskInstance, TaskInstanceHistory

    engine, ended = make_engine(url), utcnow() - timedelta(days=days_ago)
    try:
        for first in range(0, runs, 100):
            dag_runs, tis, attempts, history = [], [], [], []
            for n in range(first, min(first + 100, runs)):
                run = DagRun(dag_id=f"dag{n % 20}", run_id=f"seeded-{n}", state="success", trace_id=uuid.uuid4().hex,
                             created_at=ended, ended_at=ended, updated_at=ended)
                dag_runs.append(run.model_dump())
                for t in range(tasks_per_run):
                    ti = TaskInstance(dag_run_id=run.id, dag_id=run.dag_id, run_id=run.run_id, task_id=f"t{t}",
                                      state="success", attempt_epoch=1, ended_at=ended, created_at=ended,
                                      updated_at=ended)
                    tis.append(ti.model_dump())
                    attempts.append(TaskAttempt(task_instance_id=ti.id, try_number=1, attempt_epoch=1,
                                                state="success", claimed_at=ended, ended_at=ended).model_dump())
                    history.append(TaskInstanceHistory(task_instance_id=ti.id, try_number=1, attempt_epoch=1,
                                                       state="success", ended_at=ended).model_dump())
            with engine.begin() as conn:
                for model, rows in ((DagRun, dag_runs), (TaskInstance, tis), (TaskAttempt, attempts),
                                    (TaskInstanceHistory, history)):
                    conn.execute(insert(model.__table__), rows)
    finally:
        engine.dispose()
    return runs * tasks_per_run


class Claims:
    """One thread claiming (limit 1) and settling on a running server, recording each claim's
    latency into the list `phase` names."""

    def __init__(self, server_url: str) -> None:
        self.client = httpx.Client(base_url=server_url, timeout=60)
        self.operator = Operator(self.client).headers
        self.worker = admit(self.client, self.operator, "bench-claimer")
        self.samples: dict[str, list[float]] = {}
        self.phase, self.stop = "before", threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def ready(self, count: int) -> None:
        """`count` claimable task instances, in runs of 100."""
        for n in range(0, count, 100):
            body = {"dag_id": "bench-claims", "run_id": f"claims-{uuid.uuid4().hex[:8]}-{n}",
                    "tasks": [task(f"c{i}") for i in range(min(100, count - n))]}
            json_of(self.client.post("/v1/runs", json=body, headers=self.operator), 201)

    def _run(self) -> None:
        while not self.stop.is_set():
            started = time.perf_counter()
            resp = self.client.post("/v1/dispatch/claim", json={"limit": 1}, headers=self.worker)
            self.samples.setdefault(self.phase, []).append(time.perf_counter() - started)
            for item in json_of(resp)["items"]:
                headers = {"Authorization": f"Bearer {item['attempt_token']}"}
                self.client.post("/v1/attempts/report", json={"state": "success"}, headers=headers)

    def row(self, phase: str, rows: int = 0, seconds: float = 0.0) -> list[object]:
        got = self.samples.get(phase, [0.0])
        return [phase, len(got), percentile(got, 0.5) * 1000, percentile(got, 0.99) * 1000, rows,
                rows / seconds if seconds else 0.0, seconds]


def measure_clean(url: str, *, batch_runs: int = 50, warmup_seconds: float = 3.0, claims_ready: int = 5000,
                  before_days: float = 30.0) -> list[list[object]]:
    """On the seeded database at `url` (migrated, finished runs older than `before_days`): a
    `fenceline serve` on it, one thread claiming and settling against it, then `db clean` run
    in this process while the claims go on. Prints and answers the table: the claims before
    the clean, and during it with the rows deleted per second."""
    from app.admin.clean import clean
    from app.config import Settings
    from app.db.engine import make_engine
    from app.db.types import utcnow
    from app.logs import stores

    with tempfile.TemporaryDirectory(prefix="fenceline-bench-clean-") as data_dir:
        env = {**os.environ, "FENCELINE_DATA_DIR": data_dir, "FENCELINE_ADMIN_PASSWORD": ADMIN_PASSWORD,
               "FENCELINE_JWT_SECRET": "bench-secret-" + "x" * 40, "FENCELINE_REAPER_INTERVAL_SECONDS": "0",
               "FENCELINE_DATABASE_URL": url}
        env.pop("DATABASE_URL", None)
        served = Served(None, env, "--log-level", "warning", "--workers", "1", command=APP_CLI)
        try:
            served.wait_healthy(200)
            claims = Claims(served.url)
            claims.ready(claims_ready)
            claims.thread.start()
            time.sleep(warmup_seconds)  # the claims' latency with nothing else going on
            claims.phase = "during clean"
            settings = Settings(database_url=url, data_dir=Path(data_dir))
            engine = make_engine(settings.resolved_database_url)
            store = stores.open_store(stores.choose(settings)[0], settings, engine)
            started = time.perf_counter()
            done = clean(engine, store, before=utcnow() - timedelta(days=before_days), batch_runs=batch_runs)
            seconds = time.perf_counter() - started
            claims.stop.set()
            claims.thread.join()
            engine.dispose()
        finally:
            served.stop()
    rows = sum(n for name, n in done.tables().items() if name != "log_streams")
    result = [claims.row("before"), claims.row("during clean", rows, seconds)]
    print(table(HEADERS, result), flush=True)
    print(f"deleted: {done.tables()}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=500, help="finished runs of 10 task instances to seed")
    parser.add_argument("--batch-runs", type=int, default=50)
    args = parser.parse_args()
    from app.ops.migrate import upgrade

    with database("postgresql") as url:
        upgrade(url)
        print(f"seeded {seed(url, args.runs)} task instances in {args.runs} finished runs", flush=True)
        measure_clean(url, batch_runs=args.batch_runs)


if __name__ == "__main__":
    main()
