"""The run every Airflow-compatibility test reads, driven through fenceline's own API.

Task `extract`: try 1 is re-placed twice by infra faults, then fails in the task's own code;
try 2 succeeds. Each epoch writes its own log lines. Task `fan` is mapped (0, 1) downstream of
`extract`, each succeeding once.
"""

from dataclasses import dataclass, field

from tests.support.api import Attempt, Operator, Worker, task, ti_ids

DAG, RUN = "etl", "manual__2026-11-30T00:00:00+00:00"


@dataclass
class Scenario:
    ti_id: str
    epochs_try1: list[int] = field(default_factory=list)
    lines_try1: list[str] = field(default_factory=list)
    lines_try2: list[str] = field(default_factory=list)


def _claim_only(worker: Worker, task_id: str) -> Attempt:
    attempts = worker.claim(10)
    assert [a.task_id for a in attempts] == [task_id], [a.item for a in attempts]
    return attempts[0]


def build(operator: Operator) -> Scenario:
    worker = Worker(operator)
    run = operator.create_run(task("extract", retries=1, max_infra_attempts=3), task("fan", "extract", map_index=0),
                              task("fan", "extract", map_index=1), dag_id=DAG, run_id=RUN)
    scenario = Scenario(ti_id=ti_ids(run)["extract"])
    for n, ending in enumerate(["evicted", "node_lost", "app"]):
        attempt = _claim_only(worker, "extract")
        scenario.epochs_try1.append(attempt.epoch)
        attempt.report("running")
        line = f"try 1 attempt {n} working"
        attempt.append_log(0, line + "\n")
        scenario.lines_try1.append(line)
        if ending == "app":
            attempt.report("failed")
        else:
            attempt.report("unexecutable", reason=ending)
    attempt = _claim_only(worker, "extract")
    attempt.report("running")
    scenario.lines_try2 = ["try 2 working", "try 2 done"]
    attempt.append_log(0, "\n".join(scenario.lines_try2) + "\n")
    attempt.report("success")
    fans = worker.claim(10)
    assert sorted(a.item["correlation"]["map_index"] for a in fans) == [0, 1]
    for attempt in fans:
        attempt.append_log(0, f"fan {attempt.item['correlation']['map_index']}\n")
        attempt.report("success")
    return scenario
