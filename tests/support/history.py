"""Runs that finished some days ago, with tries, attempt records, history and logs: what
`fenceline db clean` deletes (tests/admin)."""

from datetime import timedelta

from sqlalchemy import update

from app.db.types import utcnow
from app.orchestration.models import DagRun
from tests.support.api import Operator, Worker, task


def finished(operator: Operator, run_id: str, *, dag_id: str = "dag", days_ago: float = 40, fail: bool = False,
             worker: Worker | None = None) -> None:
    """A run of two tasks, each claimed, logging and reported (`t` failing once first, then
    failing for good if `fail`), that ended `days_ago` days ago."""
    operator.create_run(task("t", retries=1), task("u"), dag_id=dag_id, run_id=run_id)
    worker = worker or Worker(operator, seat=f"worker-{dag_id}-{run_id}")
    for outcome in ("failed", "failed" if fail else "success"):
        for attempt in worker.claim(10):
            attempt.append_log(0, f"{run_id} {attempt.ti_id}\n")
            attempt.report(outcome if attempt.task_id == "t" else "success")
    assert operator.run(dag_id, run_id)["state"] == ("failed" if fail else "success")
    ended_days_ago(operator, dag_id, run_id, days_ago)


def ended_days_ago(operator: Operator, dag_id: str, run_id: str, days: float) -> None:
    with operator.client.app.state.engine.begin() as conn:
        conn.execute(update(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id)
                     .values(ended_at=utcnow() - timedelta(days=days)))
