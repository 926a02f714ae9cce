"""The demo's example run: a fan-out/fan-in DAG whose tasks are small Python programs."""

import sys
from typing import Any

DAG_ID, RUN_ID = "fenceline_demo", "demo-run-1"
VICTIM = ("transform", 2)  # the task whose worker the demo kills mid-run
FLAKY = ("transform", 1)  # the task that fails on its first try

# Each program prints what it sees of the correlation bag, so the log shows try and epoch.
_PRELUDE = ("import os, sys, time\n"
            "bag = {k: os.environ[k] for k in ('FENCELINE_TRY_NUMBER', 'FENCELINE_ATTEMPT_EPOCH')}\n"
            "print(f\"{os.environ['FENCELINE_TASK_ID']} starts: try {bag['FENCELINE_TRY_NUMBER']}, "
            "epoch {bag['FENCELINE_ATTEMPT_EPOCH']}\")\n")
STEADY = _PRELUDE + "for i in range(3):\n    time.sleep(0.2)\n    print(f'{sys.argv[1]} {i + 1}/3')\n"
FLAKY_PROGRAM = _PRELUDE + (
    "if bag['FENCELINE_TRY_NUMBER'] == '1':\n"
    "    print('upstream API answered 503: giving up on this try', file=sys.stderr)\n"
    "    sys.exit(1)\n"
    "print('upstream API answered 200')\n")
LONG = _PRELUDE + "for i in range(10):\n    time.sleep(0.3)\n    print(f'step {i + 1}/10', flush=True)\n"


def _python(program: str, *args: str) -> dict[str, Any]:
    return {"command": [sys.executable, "-c", program, *args]}


def example_tasks() -> list[dict[str, Any]]:
    """extract -> transform[0..2] -> load. transform[1] fails once (retries: 1);
    transform[2] has retries: 0, so only the infra budget can carry it past its killed worker."""
    common = {"retry_delay": 1, "max_infra_attempts": 3}
    return [
        {"task_id": "extract", "payload": _python(STEADY, "extracted batch"), **common},
        {"task_id": "transform", "map_index": 0, "upstream": ["extract"], "payload": _python(STEADY, "cleaned rows"),
         **common},
        {"task_id": "transform", "map_index": 1, "upstream": ["extract"], "payload": _python(FLAKY_PROGRAM),
         "retries": 1, **common},
        {"task_id": "transform", "map_index": 2, "upstream": ["extract"], "payload": _python(LONG), "retries": 0,
         **common},
        {"task_id": "load", "upstream": ["transform"], "payload": _python(STEADY, "loaded partition"), **common},
    ]


def label_of(task: tuple[str, int]) -> str:
    return f"{task[0]}[{task[1]}]" if task[1] >= 0 else task[0]


def label(ti: dict[str, Any]) -> str:
    return label_of((ti["task_id"], ti["map_index"]))


def dag_order(ti: dict[str, Any]) -> int:
    """Where the task stands in the example, upstream first."""
    keys = [(t["task_id"], t.get("map_index", -1)) for t in example_tasks()]
    return keys.index((ti["task_id"], ti["map_index"]))
