"""The run every Airflow-compatibility test reads, driven through fenceline's own API.

Task `extract`: try 1 is re-placed twice by infra faults, then fails in the task's own code;
try 2 succeeds. Each epoch writes its own log lines. Task `fan` is mapped (0, 1) downstream of
`extract`, each succeeding once.
"""

from dataclasses import dataclass, field

import httpx

from tests.flows import append_log, bearer, claim, report, task

DAG, RUN = "etl", "manual__2026-11-30T00:00:00+00:00"


@dataclass
class Scenario:
    ti_id: str
    epochs_try1: list[int] = field(default_factory=list)
    lines_try1: list[str] = field(default_factory=list)
    lines_try2: list[str] = field(default_factory=list)


def _claim_only(client: httpx.Client, worker: dict[str, str], task_id: str) -> tuple[dict, dict]:
    items = claim(client, worker, limit=10)
    assert [i["correlation"]["task_id"] for i in items] == [task_id], items
    return items[0], bearer(items[0]["attempt_token"])


def build(client: httpx.Client, operator: dict[str, str], worker: dict[str, str]) -> Scenario:
    resp = client.post("/v1/runs", headers=operator, json={"dag_id": DAG, "run_id": RUN, "tasks": [
        task("extract", retries=1, max_infra_attempts=3),
        task("fan", map_index=0, upstream=["extract"]), task("fan", map_index=1, upstream=["extract"])]})
    assert resp.status_code == 201, resp.text
    scenario = Scenario(ti_id=next(t["ti_id"] for t in resp.json()["task_instances"] if t["task_id"] == "extract"))
    for n, ending in enumerate(["evicted", "node_lost", "app"]):
        item, attempt = _claim_only(client, worker, "extract")
        scenario.epochs_try1.append(item["correlation"]["attempt_epoch"])
        report(client, attempt, "running")
        line = f"try 1 attempt {n} working"
        append_log(client, attempt, 0, line + "\n")
        scenario.lines_try1.append(line)
        if ending == "app":
            report(client, attempt, "failed")
        else:
            report(client, attempt, "unexecutable", reason=ending)
    _, attempt = _claim_only(client, worker, "extract")
    report(client, attempt, "running")
    scenario.lines_try2 = ["try 2 working", "try 2 done"]
    append_log(client, attempt, 0, "\n".join(scenario.lines_try2) + "\n")
    report(client, attempt, "success")
    fans = claim(client, worker, limit=10)
    assert sorted(i["correlation"]["map_index"] for i in fans) == [0, 1]
    for item in fans:
        attempt = bearer(item["attempt_token"])
        append_log(client, attempt, 0, f"fan {item['correlation']['map_index']}\n")
        report(client, attempt, "success")
    return scenario
