"""What the demo prints once the run is over: tries, epochs, why each re-place happened."""

from typing import Any
from urllib.parse import quote

from app.worker.demo_dag import DAG_ID, RUN_ID, dag_order, label

WHY = {
    "agent_lost": "its worker stopped heart-beating",
    "worker_lost": "its worker was superseded or observed terminal",
    "dispatch_lost": "claimed but never started",
    "oom_killed": "killed by the OOM killer",
    "deadline_exceeded": "ran past its timeout",
    "evicted": "evicted by a signal from outside",
    "node_lost": "its node was lost",
    "dispatch_failed": "could not be dispatched",
}


def collapsed_log_url(server: str, ti: dict[str, Any], try_number: int) -> str:
    url = (f"{server}/api/v2/dags/{quote(ti['dag_id'])}/dagRuns/{quote(ti['run_id'])}/taskInstances/"
           f"{quote(ti['task_id'])}/logs/{try_number}")
    return url + (f"?map_index={ti['map_index']}" if ti["map_index"] >= 0 else "")


def attempt_line(attempt: dict[str, Any], seats: dict[str, str]) -> str:
    """One attempt: where it ran and how it ended."""
    where = seats.get(str(attempt["execution_id"]), "an unknown execution")
    head = f"try {attempt['try_number']} epoch {attempt['attempt_epoch']} on {where}: "
    kind, reason = attempt["outcome_kind"], attempt["reason"]
    if kind == "success":
        return head + "success"
    if kind == "app":
        return head + "failed (application failure: spends a try)"
    if kind == "infra":
        return head + f"unexecutable: {reason} ({WHY.get(reason, reason)}) -> re-placed, same try"
    return head + (attempt["state"] or "no outcome")


def report(server: str, run: dict[str, Any], attempts: dict[str, list[dict[str, Any]]],
           seats: dict[str, str], victim: dict[str, Any] | None, victim_log: str, killed_seat: str | None) -> str:
    """The summary an operator wants: every task's tries and epochs with why each ended, the
    retry budget the killed worker did not spend, and where the collapsed log is."""
    lines = [f"run {DAG_ID} / {RUN_ID} finished: {run['state']}", "", "tries and epochs (one line per attempt)"]
    width = max(len(label(ti)) for ti in run["task_instances"])
    for ti in sorted(run["task_instances"], key=dag_order):
        for n, attempt in enumerate(attempts[ti["ti_id"]]):
            lines.append(f"  {(label(ti) if n == 0 else ''):<{width}}  {attempt_line(attempt, seats)}")
    if victim is not None:
        name = label(victim)
        lines += ["", f"the killed worker did not spend {name}'s retries"]
        if killed_seat:
            lines.append(f"  {killed_seat} was killed with SIGKILL while {name} ran on it")
        lines += [
            f"  try_number {victim['try_number']} (retries: {victim['retries']}) after "
            f"{len(attempts[victim['ti_id']])} attempts, infra_attempts {victim['infra_attempts']} of "
            f"{victim['max_infra_attempts']} used, last failure: {victim['last_failure_kind']} "
            f"({victim['last_failure_reason']})",
            "  an infrastructure fault is re-placed on its own budget; only application failures spend tries",
            "",
            f"the collapsed log of {name} try {victim['try_number']} (every epoch of the try, in order)",
            f"  Airflow-compatible URL: {collapsed_log_url(server, victim, victim['try_number'])}",
            "  which reads (full_content=true):",
            *(f"  | {line}" for line in victim_log.rstrip("\n").splitlines()),
        ]
    return "\n".join(lines)
