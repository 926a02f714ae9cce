"""`fenceline demo --scenario fencing`: a worker paused with its task (SIGSTOP, a stand-in for a
partitioned node) while the task is about to write to a database; the task is re-placed, the
replacement writes its row through the fencing guard, and when the paused task resumes its late
write is refused (docs/fencing.md)."""

import json
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from app.worker.demo import PASSWORD, SEATS, Demo

DAG_ID, RUN_ID, TASK_ID = "fencing_demo", "demo-run-1", "load_totals"
DAY = "2026-12-06"

# The task: computes a total, waits at its write until the demo says go (go-<token>), writes
# the row through the guard and records what happened (result-<token>.json) for the demo.
TASK = """
import json, pathlib, sqlite3, sys, time
from app.fencing import Fence, StaleToken, create_fence_table, guarded_write

root, day = pathlib.Path(sys.argv[1]), sys.argv[2]
fence = Fence.from_env()
print(f"fencing token {fence.token}: computing the totals of {day}", flush=True)
total = sum(range(10))
(root / f"computed-{fence.token}").touch()
while not (root / f"go-{fence.token}").exists():
    time.sleep(0.05)
conn = sqlite3.connect(root / "store.db", timeout=30)
create_fence_table(conn)  # once, as a migration would; here the task sets up its own store
conn.execute("CREATE TABLE IF NOT EXISTS daily_totals (day TEXT PRIMARY KEY, total INTEGER, written_by_token INTEGER)")
conn.commit()
try:
    guarded_write(conn, "INSERT INTO daily_totals (day, total, written_by_token) VALUES (?, ?, ?) "
                        "ON CONFLICT (day) DO UPDATE SET total = excluded.total, "
                        "written_by_token = excluded.written_by_token", (day, total, fence.token))
    conn.commit()
    outcome = {"written": True, "detail": f"wrote total {total} for {day}"}
except StaleToken as exc:
    conn.rollback()
    outcome = {"written": False, "detail": f"StaleToken: {exc}"}
(root / f"result-{fence.token}.json").write_text(json.dumps(outcome))
print(outcome["detail"], flush=True)
sys.exit(0 if outcome["written"] else 3)
"""


class FencingDemo(Demo):
    def introduce(self) -> None:
        self.say("fenceline demo: fencing a task's own writes (docs/fencing.md)")
        self.say(f"  server   {self.url} (SQLite under {self.root}; operator admin / {PASSWORD})")
        self.say(f"  workers  {', '.join(SEATS)} (one task at a time each)")
        self.say(f"  store    {self.store} (SQLite): the database the task writes its totals to")
        self.say(f"  run      {DAG_ID} / {RUN_ID}: {TASK_ID}, whose worker is paused with the task just "
                 "before its write")

    @property
    def store(self) -> Path:
        return self.root / "store.db"

    def run(self, timeout: float) -> int:
        task = {"task_id": TASK_ID, "payload": {"command": [sys.executable, "-c", TASK, str(self.root), DAY]},
                "retries": 0, "max_infra_attempts": 3}
        self.http.post("/v1/runs", json={"dag_id": DAG_ID, "run_id": RUN_ID, "tasks": [task]}).raise_for_status()
        self.say("\nwhat happens")
        deadline = time.monotonic() + timeout
        first = self._wait(lambda: self._computed(), "the task to reach its write", deadline)
        ti = self._task_instance()
        seat = self._seat_of(ti)
        worker, group = self.workers[seat], self._task_group(seat)
        os.killpg(group, signal.SIGSTOP)
        worker.send_signal(signal.SIGSTOP)
        self.event(f"{TASK_ID} holds fencing token {first} on {seat} and is about to write: pausing the worker "
                   f"and its task with SIGSTOP (pids {worker.pid}, group {group}), as a partitioned node")
        try:
            second = self._wait(lambda: self._computed(above=first), "the task to be re-placed", deadline)
            replaced = self._task_instance()
            self.event(f"the reaper re-placed it: {TASK_ID} runs on {self._seat_of(replaced)} with fencing token "
                       f"{second} ({replaced['last_failure_reason']}, same try)")
            (self.root / f"go-{second}").touch()
            self.event(f"token {second}: {self._wait(lambda: self._result(second), 'its write', deadline)['detail']}")
            self._wait(lambda: self._task_instance()["state"] == "success", "the run to succeed", deadline)
            self.event("run finished: success")
            (self.root / f"go-{first}").touch()
            os.killpg(group, signal.SIGCONT)
            self.event(f"resuming the paused task (SIGCONT): it goes on to write with token {first}")
            late = self._wait(lambda: self._result(first), "the late write", deadline)
            self.event(f"token {first}: {late['detail']}")
        finally:
            os.killpg(group, signal.SIGCONT)
            worker.send_signal(signal.SIGCONT)
        self.event(f"resuming {seat}: its next call is answered stale-report, so it ends what is left of the task")
        rows = self._rows()
        self.say(f"\nthe store ({self.store.name}) after both writes")
        for day, total, token in rows["daily_totals"]:
            self.say(f"  daily_totals  day {day}: total {total}, written by fencing token {token}")
        for key, token in rows["fenceline_fences"]:
            self.say(f"  fence         {key}: the largest token seen is {token}")
        held = rows["daily_totals"] == [(DAY, 45, second)] and not late["written"]
        self.say(f"\nthe superseded attempt's late write was {'refused' if not late['written'] else 'APPLIED'}; "
                 f"the replacement's row {'stands' if held else 'was overwritten'}")
        return 0 if held else 1

    def _rows(self) -> dict[str, list[tuple]]:
        conn = sqlite3.connect(self.store)
        try:
            return {table: conn.execute(f"SELECT * FROM {table}").fetchall()
                    for table in ("daily_totals", "fenceline_fences")}
        finally:
            conn.close()

    def _wait(self, found: Any, what: str, deadline: float) -> Any:
        while not (value := found()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"gave up waiting for {what}")
            time.sleep(0.05)
        return value

    def _computed(self, above: int = 0) -> int | None:
        tokens = [int(p.name.split("-")[1]) for p in self.root.glob("computed-*")]
        return next((t for t in sorted(tokens) if t > above), None)

    def _result(self, token: int) -> dict[str, Any] | None:
        path = self.root / f"result-{token}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def _task_instance(self) -> dict[str, Any]:
        (ti,) = self.http.get(f"/v1/runs/{DAG_ID}/{RUN_ID}").json()["task_instances"]
        return ti

    def _seat_of(self, ti: dict[str, Any]) -> str:
        holder = self.seats_by_execution().get(str(ti["execution_id"]), "")
        return next(s for s in SEATS if holder.startswith(s))

    def _task_group(self, seat: str) -> int:
        """The process group of the task the worker of `seat` runs, from its attempt record."""
        def recorded() -> int | None:
            for path in (self.root / seat / "attempts").glob("*.json"):
                if group := json.loads(path.read_text()).get("pgid"):
                    return group
            return None

        return self._wait(recorded, "the task's process group", time.monotonic() + 10)
