"""`fenceline worker alive`, the worker Pod's liveness probe (deploy/kubernetes/worker.yaml): run
as the kubelet runs it, a command beside a real worker process, which it passes while the
worker's claim loop turns and fails once the loop hangs (the process stopped with SIGSTOP) or
the worker has stopped, or before the worker has reached its loop."""

import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from app.worker.agent import UNREACHABLE_CAP_SECONDS
from tests.support.agents import REPO, WorkerProcess
from tests.support.ports import free_port
from tests.support.servers import clean_env
from tests.support.waiting import wait_until

MAX_AGE = 3.0  # a worker claiming every 0.5 s (--claim-wait) turns its loop well within it


def probe(worker: WorkerProcess, *flags: str, max_age: float = MAX_AGE) -> subprocess.CompletedProcess:
    """The probe, as the Pod spec runs it: the worker's environment, its state directory."""
    env = {**clean_env(), "FENCELINE_WORKER_STATE_DIR": str(worker.state_dir)}
    return subprocess.run([sys.executable, "-m", "app.cli", "worker", "alive", "--max-age", str(max_age), *flags],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def passes(worker: WorkerProcess, max_age: float = MAX_AGE) -> bool:
    return probe(worker, max_age=max_age).returncode == 0


def fails(worker: WorkerProcess) -> str:
    """The probe's one line when it fails ('' while it passes)."""
    done = probe(worker)
    return done.stderr if done.returncode == 1 else ""


class TestLiveWorker:
    def test_it_passes_while_the_loop_turns_and_fails_once_the_worker_hangs(self, server, workers):
        worker = workers(server, "alive-1", "--claim-wait", "0.5")
        wait_until(lambda: passes(worker), "the probe to pass")
        time.sleep(MAX_AGE + 1)  # longer than --max-age: an idle worker's waiting claims keep it alive
        assert passes(worker)

        worker.proc.send_signal(signal.SIGSTOP)  # hung: nothing of it runs
        try:
            why = wait_until(lambda: fails(worker), "the probe to fail on a hung worker")
            assert why.startswith("fenceline worker alive: the worker's claim loop last turned")
            assert why.count("\n") == 1
        finally:
            worker.proc.send_signal(signal.SIGCONT)
        wait_until(lambda: passes(worker), "the probe to pass again once the worker runs again")

        assert worker.stop() == 0
        assert "has stopped" in fails(worker)  # at once, not --max-age later

    def test_an_unreachable_server_does_not_fail_it(self, serve, workers):
        # The loop turns once per back-off, which grows to UNREACHABLE_CAP_SECONDS (the Pod's
        # --max-age, 60 s, is far above it).
        max_age = UNREACHABLE_CAP_SECONDS + 2
        server = serve()
        worker = workers(server, "alive-2", "--claim-wait", "0.5")
        wait_until(lambda: passes(worker, max_age), "the probe to pass")
        server.__exit__(None, None, None)
        wait_until(lambda: "server unreachable" in worker.output, "the worker to find the server gone")
        deadline = time.monotonic() + max_age + 2
        while time.monotonic() < deadline:  # through several back-offs, up to the longest
            assert passes(worker, max_age)  # a restart would not bring the server back
            time.sleep(0.5)
        assert worker.stop() == 0


class TestStartingWorker:
    def test_it_fails_until_the_worker_reaches_its_claim_loop_whatever_a_previous_one_left(self, workers, tmp_path):
        nowhere = SimpleNamespace(url=f"http://127.0.0.1:{free_port()}")  # admission never answers
        state = tmp_path / "alive-3"
        state.mkdir()
        (state / "liveness").touch()  # left fresh by the container before a restart
        worker = workers(nowhere, "alive-3")
        wait_until(lambda: "retrying with back-off" in worker.output, "the worker to try its admission")
        assert "has not reached its claim loop" in fails(worker)
        assert worker.stop() == 0


class TestSettings:
    def test_a_bad_max_age_is_one_line_and_exit_2(self, tmp_path: Path):
        worker = SimpleNamespace(state_dir=tmp_path)
        for bad in ("0", "soon", "nan"):
            done = probe(worker, "--max-age", bad)  # type: ignore[arg-type]
            assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
            assert "--max-age" in done.stderr
