"""The dashboard's pages at scale: a run of 200 task instances with 1,000 attempt epochs, made
through the API against a real `fenceline serve` on SQLite and on a throw-away PostgreSQL
database. Every task is re-placed after three infra faults and retried once after an
application failure (five epochs, two tries); the DAG has ten layers and a 20-way mapped task.
Prints each page's size (the timeline's goal: under 1 MB) and its server time, p50/p99 of
GET round trips on the loopback. Run: python bench/dashboard.py [--gets 20] [--backends sqlite].
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ADMIN_PASSWORD, Server, admit, percentile, table  # noqa: E402

LAYERS, WIDTH = 10, 20  # 200 task instances
MAPPED_LAYER = 4
OUTCOMES = ("unexecutable", "unexecutable", "failed", "unexecutable", "success")  # five epochs, two tries
WORKERS = 4


def tasks() -> list[dict]:
    """Ten layers of twenty; each task waits on two of the layer before; layer 4 is one task
    mapped twenty ways."""
    def name(layer: int, i: int) -> str:
        return "fan" if layer == MAPPED_LAYER else f"l{layer}_{i}"

    found = []
    for layer in range(LAYERS):
        for i in range(WIDTH):
            ups = sorted({name(layer - 1, i), name(layer - 1, (i + 1) % WIDTH)}) if layer else []
            found.append({"task_id": name(layer, i), "map_index": i if layer == MAPPED_LAYER else -1,
                          "payload": {"command": ["true"]}, "upstream": ups, "retries": 1, "retry_delay": 0,
                          "max_infra_attempts": 3})
    return found


def make_run(client, operator: dict[str, str]) -> int:
    """The run, driven to its end by WORKERS admitted executions; answers how many epochs it took."""
    client.post("/v1/runs", headers=operator, json={"dag_id": "bench", "run_id": "wide", "tasks": tasks()}
                ).raise_for_status()
    workers = [admit(client, operator, f"bench-{n}") for n in range(WORKERS)]
    epochs, idle, rounds = 0, 0, 0
    while idle < WORKERS:  # until every worker found nothing to claim
        worker, rounds = workers[rounds % WORKERS], rounds + 1
        items = client.post("/v1/dispatch/claim", json={"limit": 50}, headers=worker).json()["items"]
        idle = 0 if items else idle + 1
        for item in items:
            epochs += 1
            token = {"Authorization": f"Bearer {item['attempt_token']}"}
            seen = item["correlation"]["attempt_epoch"]  # 1, 3, 5, …: each re-place and each claim bump it
            outcome = OUTCOMES[min(seen // 2, len(OUTCOMES) - 1)]
            client.post("/v1/attempts/report", json={"state": "running"}, headers=token).raise_for_status()
            body = {"state": outcome, **({"reason": "evicted"} if outcome == "unexecutable" else {})}
            client.post("/v1/attempts/report", json=body, headers=token).raise_for_status()
    return epochs


def measure(client, path: str, gets: int) -> list[object]:
    samples, size = [], 0
    for _ in range(gets):
        start = time.perf_counter()
        resp = client.get(path)
        samples.append(time.perf_counter() - start)
        resp.raise_for_status()
        size = len(resp.content)
    return [path, size, percentile(samples, 0.5) * 1000, percentile(samples, 0.99) * 1000]


def run(backend: str, gets: int) -> list[list[object]]:
    with Server(backend, infra_backoff_base_seconds="0") as server, server.client() as client:
        epochs = make_run(client, server.operator(client))
        login = client.post("/ui/login", data={"username": "admin", "password": ADMIN_PASSWORD})
        assert login.status_code == 303 and "fenceline_ui" in client.cookies, login.text
        print(f"{backend}: a run of {LAYERS * WIDTH} task instances, {epochs} epochs", file=sys.stderr)
        return [[backend, *measure(client, path, gets)] for path in (
            "/ui/runs/bench/wide?view=timeline", "/ui/runs/bench/wide?view=graph", "/ui/runs/bench/wide",
            "/ui/runs", "/ui/seats")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gets", type=int, default=20, help="GETs of each page")
    parser.add_argument("--backends", default="sqlite,postgresql")
    args = parser.parse_args()
    rows = []
    for backend in args.backends.split(","):
        rows += run(backend, args.gets)
    print(table(["db", "page", "bytes", "p50 ms", "p99 ms"], rows))


if __name__ == "__main__":
    main()
