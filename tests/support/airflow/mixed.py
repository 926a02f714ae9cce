"""Runs and task instances in every state the Airflow filters tell apart, driven through
fenceline's own API: two DAGs, five runs, two pools and two queues.

| run | task instances (native state) |
|---|---|
| etl/r0 (success) | t success |
| etl/r1 (running) | extract success, transform running (gpus pool, gpu queue), load none |
| report/daily (running) | a failed, b upstream_failed, c infra_failed (shown failed), d scheduled (gpus, gpu) |
| report/weekly (failed) | x failed |
| etl/r2 (running) | extract up_for_retry (its try 1 spent), report queued |
"""

from tests.support.api import Operator, Worker, task

GPU = {"queue": "gpu", "pool": "gpus"}
RUNS = [("etl", "r0", "success"), ("etl", "r1", "running"), ("report", "daily", "running"),
        ("report", "weekly", "failed"), ("etl", "r2", "running")]
# (dag_id, run_id, task_id) -> the state an Airflow client sees.
SHOWN = {
    ("etl", "r0", "t"): "success",
    ("etl", "r1", "extract"): "success", ("etl", "r1", "transform"): "running", ("etl", "r1", "load"): None,
    ("report", "daily", "a"): "failed", ("report", "daily", "b"): "upstream_failed",
    ("report", "daily", "c"): "failed", ("report", "daily", "d"): "scheduled",
    ("report", "weekly", "x"): "failed",
    ("etl", "r2", "extract"): "up_for_retry", ("etl", "r2", "report"): "queued",
}


def _only(worker: Worker, *task_ids: str, queues: list[str] | None = None) -> dict:
    attempts = {a.task_id: a for a in worker.claim(10, queues)}
    assert sorted(attempts) == sorted(task_ids), sorted(attempts)
    return attempts


def build(operator: Operator) -> None:
    """Each run is created, then claimed and reported on before the next exists, so that a claim
    takes exactly that run's ready work."""
    assert operator.post("/v1/pools", json={"name": "gpus", "slots": 4}).status_code == 201
    worker, gpu_worker = Worker(operator), Worker(operator, seat="gpu-worker")

    operator.create_run(task("t"), dag_id="etl", run_id="r0")
    _only(worker, "t")["t"].report("success")

    operator.create_run(task("extract"), task("transform", "extract", **GPU), task("load", "transform"),
                        dag_id="etl", run_id="r1")
    _only(worker, "extract")["extract"].report("success")
    _only(gpu_worker, "transform", queues=["gpu"])["transform"].report("running")

    operator.create_run(task("a"), task("b", "a"), task("c", max_infra_attempts=0), task("d", **GPU),
                        dag_id="report", run_id="daily")
    daily = _only(worker, "a", "c")
    daily["a"].report("running")
    daily["a"].report("failed")
    daily["c"].report("running")
    daily["c"].report("unexecutable", reason="evicted")

    operator.create_run(task("x"), dag_id="report", run_id="weekly")
    _only(worker, "x")["x"].report("failed")

    operator.create_run(task("extract", retries=1, retry_delay=3600), task("report"), dag_id="etl", run_id="r2")
    r2 = _only(worker, "extract", "report")
    r2["extract"].report("running")
    r2["extract"].report("failed")


def keys(task_instances) -> set[tuple[str, str, str]]:
    """(dag_id, dag_run_id, task_id) of each task instance a client deserialised (or a dict)."""
    return {(t["dag_id"], t["dag_run_id"], t["task_id"]) if isinstance(t, dict) else (t.dag_id, t.dag_run_id, t.task_id)
            for t in task_instances}


def shown(state: str | None) -> set[tuple[str, str, str]]:
    return {key for key, value in SHOWN.items() if value == state}
