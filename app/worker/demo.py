"""`fenceline demo`: a throw-away server and two workers run an example DAG; one worker is
killed mid-task, and what happened is explained. Everything it starts, it stops and removes."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from app.worker.demo_dag import DAG_ID, FLAKY, RUN_ID, VICTIM, dag_order, example_tasks, label, label_of
from app.worker.demo_report import collapsed_log_url, report

PASSWORD = "demo-password"
SEATS = ("demo-worker-1", "demo-worker-2")
# Short thresholds so that a killed worker is noticed in seconds, not minutes.
SERVER_SETTINGS = {"FENCELINE_REAPER_INTERVAL_SECONDS": "0.5", "FENCELINE_AGENT_LOST_AFTER_SECONDS": "2",
                   "FENCELINE_DISPATCH_LOST_AFTER_SECONDS": "30", "FENCELINE_INFRA_BACKOFF_BASE_SECONDS": "0.5"}
WORKER_FLAGS = ["--concurrency", "1", "--heartbeat-interval", "0.5", "--grace-period", "5"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env() -> dict[str, str]:
    """The caller's environment without any fenceline settings: the demo must not pick up,
    or touch, a real installation's database."""
    return {k: v for k, v in os.environ.items() if not k.startswith("FENCELINE_") and k != "DATABASE_URL"}


class Demo:
    def __init__(self, root: Path, out: Any = sys.stdout) -> None:
        self.root, self.out = root, out
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}
        self.started = time.monotonic()
        self.http = httpx.Client(base_url=self.url, timeout=30)

    def introduce(self) -> None:
        self.say("fenceline demo: a throw-away server, two workers and one example run")
        self.say(f"  server   {self.url} (SQLite under {self.root}; operator admin / {PASSWORD})")
        self.say(f"  workers  {', '.join(SEATS)} (one task at a time each)")
        self.say(f"  run      {DAG_ID} / {RUN_ID}: extract -> transform[0..2] -> load")
        self.say(f"           {label_of(FLAKY)} fails on its first try (retries: 1); "
                 f"{label_of(VICTIM)} (retries: 0) loses its worker mid-run")

    def say(self, line: str = "") -> None:
        print(line, file=self.out, flush=True)

    def event(self, line: str) -> None:
        self.say(f"  [{time.monotonic() - self.started:5.1f}s] {line}")

    def _spawn(self, args: list[str], log_name: str, env: dict[str, str]) -> subprocess.Popen:
        with (self.root / log_name).open("ab") as log:
            return subprocess.Popen([sys.executable, "-m", "app.cli", *args], stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True)

    # processes ---------------------------------------------------------------------------------

    def start(self) -> None:
        env = {**_clean_env(), **SERVER_SETTINGS, "FENCELINE_DATA_DIR": str(self.root / "server"),
               "FENCELINE_ADMIN_PASSWORD": PASSWORD}
        self.say("\nstarting the server (it creates and migrates its database first: a few seconds)")
        self.server = self._spawn(["serve", "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"],
                                  "server.log", env)
        self._wait_for("the server to answer /health", lambda: self._healthy(), 60)
        self.say(f"server up; starting the workers {' and '.join(SEATS)} (each admits itself as its seat's execution)")
        token = self.http.post("/auth/token", json={"username": "admin", "password": PASSWORD}).json()["access_token"]
        self.http.headers["Authorization"] = f"Bearer {token}"
        worker_env = {**_clean_env(), "FENCELINE_ADMIN_PASSWORD": PASSWORD}
        for seat in SEATS:
            self.workers[seat] = self._spawn(["worker", "--server", self.url, "--seat", seat, "--state-dir",
                                              str(self.root / seat), *WORKER_FLAGS], f"{seat}.log", worker_env)
        self._wait_for("both workers to admit themselves",
                       lambda: all(self.http.get(f"/v1/seats/{s}").status_code == 200 for s in SEATS), 60)
        self.say("both workers admitted; creating the run")

    def _healthy(self) -> bool:
        if self.server is not None and self.server.poll() is not None:
            raise RuntimeError(f"the server exited ({self.server.returncode}); see {self.root / 'server.log'}")
        try:
            return self.http.get("/health").status_code == 200
        except httpx.TransportError:
            return False

    def _wait_for(self, what: str, ready: Any, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not ready():
            if time.monotonic() > deadline:
                raise TimeoutError(f"gave up waiting for {what} after {seconds:.0f}s")
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM everything still running (workers first, so they can report), then SIGKILL
        what did not stop in time."""
        for what, group in (("the workers (each hands back what it holds; up to 15 s)", list(self.workers.values())),
                            ("the server", [self.server] if self.server else [])):
            if any(proc.poll() is None for proc in group):
                self.say(f"stopping {what}")
            for proc in group:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in group:
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.http.close()

    def show_logs(self, lines: int = 15) -> None:
        """The end of every process's log, since the directory is about to go."""
        for log in sorted(self.root.glob("*.log")):
            self.say(f"--- last lines of {log.name}")
            for line in log.read_text(errors="replace").splitlines()[-lines:]:
                self.say(f"    {line}")

    # the run --------------------------------------------------------------------------------------

    def seats_by_execution(self) -> dict[str, str]:
        found = {}
        for seat in SEATS:
            for execution in self.http.get(f"/v1/seats/{seat}/executions").json()["items"]:
                generation = execution["generation"]
                found[execution["execution_id"]] = seat if generation == 1 else f"{seat} (generation {generation})"
        return found

    def run(self, timeout: float) -> int:
        body = {"dag_id": DAG_ID, "run_id": RUN_ID, "tasks": example_tasks()}
        resp = self.http.post("/v1/runs", json=body)
        resp.raise_for_status()
        self.say("\nwhat happens")
        seen: dict[str, tuple] = {}
        killed_seat, deadline = None, time.monotonic() + timeout
        while True:
            run = self.http.get(f"/v1/runs/{DAG_ID}/{RUN_ID}").json()
            seats = self.seats_by_execution()
            for ti in sorted(run["task_instances"], key=dag_order):
                self._note(ti, seen, seats)
            victim = self._find(run, VICTIM)
            if killed_seat is None and self._victim_is_mid_run(victim):
                killed_seat = self._kill_worker_of(victim, seats)
            if run["state"] in ("success", "failed"):
                break
            if time.monotonic() > deadline:
                self.event(f"the run did not finish within {timeout:.0f}s (state {run['state']})")
                return 1
            time.sleep(0.25)
        self.event(f"run finished: {run['state']}")
        attempts = {ti["ti_id"]: self.http.get(f"/v1/task-instances/{ti['ti_id']}/attempts").json()["items"]
                    for ti in run["task_instances"]}
        victim = self._find(run, VICTIM)
        log = self.collapsed_log(victim)
        self.say()
        self.say(report(self.url, run, attempts, self.seats_by_execution(), victim, log, killed_seat))
        return 0 if run["state"] == "success" and killed_seat else 1

    def collapsed_log(self, ti: dict[str, Any]) -> str:
        """The try's log as an Airflow 3 client reads it: through the URL the report prints."""
        url = collapsed_log_url(self.url, ti, ti["try_number"])
        resp = self.http.get(url + ("&" if "?" in url else "?") + "full_content=true")
        resp.raise_for_status()
        return "".join(line["event"] + "\n" for line in resp.json()["content"])

    @staticmethod
    def _find(run: dict[str, Any], which: tuple[str, int]) -> dict[str, Any]:
        return next(ti for ti in run["task_instances"] if (ti["task_id"], ti["map_index"]) == which)

    def _note(self, ti: dict[str, Any], seen: dict[str, tuple], seats: dict[str, str]) -> None:
        """One line per change of a task instance's state, try or epoch."""
        key = (ti["state"], ti["try_number"], ti["attempt_epoch"])
        if seen.get(ti["ti_id"]) == key or ti["state"] == "none":
            return
        seen[ti["ti_id"]] = key
        where = f" on {seats.get(str(ti['execution_id']), '?')}" if ti["execution_id"] else ""
        why = ""
        if ti["state"] in ("scheduled", "up_for_retry") and ti["last_failure_kind"]:
            why = (" after an application failure (a try is spent)" if ti["last_failure_kind"] == "app" else
                   f" after an infra fault: {ti['last_failure_reason']} (same try, infra_attempts "
                   f"{ti['infra_attempts']} of {ti['max_infra_attempts']})")
        self.event(f"{label(ti)}: {ti['state']}{where} — try {ti['try_number']}, epoch {ti['attempt_epoch']}{why}")

    def _victim_is_mid_run(self, victim: dict[str, Any]) -> bool:
        if victim["state"] != "running":
            return False
        log = self.http.get(f"/v1/task-instances/{victim['ti_id']}/tries/{victim['try_number']}/log").text
        return "step 2/" in log  # its first lines have reached the server

    def _kill_worker_of(self, victim: dict[str, Any], seats: dict[str, str]) -> str:
        holder = seats.get(str(victim["execution_id"]), "")
        seat = next(s for s in SEATS if holder.startswith(s))
        proc = self.workers[seat]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.event(f"{label(victim)} is running on {seat}: killing that worker with SIGKILL (pid {proc.pid}); "
                   "its heartbeats stop, the reaper re-places the task on the other worker")
        return seat


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def run_demo(keep: bool = False, timeout: float = 120.0, scenario: type[Demo] = Demo) -> int:
    """Run `scenario` (a Demo) on a throw-away server and two workers, then remove them."""
    root = Path(tempfile.mkdtemp(prefix="fenceline-demo-"))
    for sig in (signal.SIGTERM, signal.SIGINT):  # cleaned up either way, even where SIGINT was ignored
        signal.signal(sig, _interrupt)
    demo = scenario(root)
    demo.introduce()
    code = 1
    try:
        demo.start()
        code = demo.run(timeout)
        if keep:
            demo.say(f"\nthe server stays up at {demo.url} (operator admin / {PASSWORD}); Ctrl-C ends the demo")
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        code = code if keep else 130
    except (TimeoutError, RuntimeError, httpx.HTTPError) as exc:
        demo.say(f"demo failed: {exc}")
    finally:
        if code not in (0, 130):
            demo.show_logs()
        demo.stop()
        shutil.rmtree(root, ignore_errors=True)
        demo.say(f"\ncleaned up: server and workers stopped, {root} removed")
    return code
