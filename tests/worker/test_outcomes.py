"""What a command's end is reported as, should_terminate, and a graceful stop."""

import signal

import pytest

from app.worker.logship import utf8_cut
from app.worker.process import classify, group_alive, task_env
from tests.support.agents import GATED, python_task
from tests.support.api import Operator, json_of
from tests.support.waiting import wait_until


class TestClassify:
    @pytest.mark.parametrize(("returncode", "stopped_for", "expected"), [
        (0, None, ("success", None)),
        (3, None, ("failed", None)),
        (-signal.SIGKILL, None, ("unexecutable", "oom_killed")),
        (-signal.SIGSEGV, None, ("failed", None)),
        (-signal.SIGABRT, None, ("failed", None)),
        (-signal.SIGTERM, None, ("unexecutable", "evicted")),
        (-signal.SIGXCPU, None, ("unexecutable", "deadline_exceeded")),
        (-signal.SIGTERM, "deadline", ("unexecutable", "deadline_exceeded")),
        (-signal.SIGKILL, "shutdown", ("unexecutable", "worker_lost")),
        (0, "shutdown", ("unexecutable", "worker_lost")),
    ])
    def test_outcome(self, returncode, stopped_for, expected):
        outcome = classify(returncode, stopped_for)
        assert (outcome.state, outcome.reason) == expected


class TestTaskEnv:
    def test_the_bag_wins_over_the_payload_and_the_password_stays_behind(self):
        bag = {"ti_id": "t1", "dag_id": "d", "run_id": "r", "task_id": "t", "map_index": -1, "try_number": 2,
               "attempt_epoch": 5, "tenant_id": None, "trace_id": "tr"}
        env = task_env({"env": {"FENCELINE_TRY_NUMBER": "9", "MINE": "1"}}, bag,
                       {"PATH": "/bin", "FENCELINE_ADMIN_PASSWORD": "secret", "FENCELINE_LAUNCHER_TOKEN": "t"})
        assert (env["FENCELINE_TRY_NUMBER"], env["FENCELINE_ATTEMPT_EPOCH"], env["MINE"]) == ("2", "5", "1")
        assert env["FENCELINE_TENANT_ID"] == "" and "FENCELINE_ADMIN_PASSWORD" not in env
        assert "FENCELINE_LAUNCHER_TOKEN" not in env

    def test_the_fence_is_the_epoch_and_the_task_instance_and_the_payload_cannot_change_it(self):
        bag = {"ti_id": "t1", "try_number": 2, "attempt_epoch": 5}
        env = task_env({"env": {"FENCELINE_FENCING_TOKEN": "99", "FENCELINE_FENCE_KEY": "other"}}, bag, {})
        assert (env["FENCELINE_FENCING_TOKEN"], env["FENCELINE_FENCE_KEY"]) == ("5", "t1")


class TestUtf8Cut:
    @pytest.mark.parametrize(("data", "cut"), [
        (b"abc", 3), ("é".encode(), 2), ("é".encode()[:1], 0), (b"a" + "€".encode()[:2], 1),
        (b"a" + "😀".encode()[:3], 1), (b"\x80\x80", 2), (b"a\xffb", 3), (b"", 0),
    ])
    def test_never_splits_a_character(self, data, cut):
        assert utf8_cut(data) == cut


def crash_program(sig: str) -> str:
    return f"import os, signal\nprint('about to die', flush=True)\nos.kill(os.getpid(), signal.{sig})"


def final_task(task_id: str, program: str, **payload: object) -> dict:
    """A task whose first outcome is final (no retries, no infra budget), to read it off the TI."""
    task = python_task(task_id, program, retries=0, max_infra_attempts=0)
    task["payload"].update(payload)
    return task


class TestReportedOutcomes:
    def test_each_end_is_routed_as_what_it_is(self, server, workers):
        operator = Operator(server.client())
        operator.create_run(
            final_task("exits-3", "import sys; sys.exit(3)"),
            final_task("segfaults", crash_program("SIGSEGV")),
            final_task("oom", crash_program("SIGKILL")),
            final_task("too-slow", "import time; time.sleep(60)", timeout_seconds=0.5),
            {"task_id": "image-only", "payload": {"image": "busybox"}, "retries": 0, "max_infra_attempts": 0},
            final_task("sees-env", "import os; print(os.environ['MINE'], os.environ['FENCELINE_TASK_ID'])",
                       env={"MINE": "from-payload"}),
        )
        worker = workers(server, "etl-a", "--concurrency", "6")
        wait_until(lambda: operator.run()["state"] == "failed", "the run to finish")
        tis = {ti["task_id"]: ti for ti in operator.run()["task_instances"]}
        outcomes = {k: (ti["state"], ti["last_failure_kind"], ti["last_failure_reason"]) for k, ti in tis.items()}
        assert outcomes == {
            "exits-3": ("failed", "app", None),
            "segfaults": ("failed", "app", None),
            "oom": ("infra_failed", "infra", "oom_killed"),
            "too-slow": ("infra_failed", "infra", "deadline_exceeded"),
            "image-only": ("infra_failed", "infra", "dispatch_failed"),
            "sees-env": ("success", None, None),
        }
        assert "from-payload sees-env\n" in operator.log(tis["sees-env"]["ti_id"])
        assert "about to die\n[fenceline-worker] killed by SIGKILL" in operator.log(tis["oom"]["ti_id"])
        assert "crashed with SIGSEGV: reporting failed" in operator.log(tis["segfaults"]["ti_id"])
        assert worker.stop() == 0


class TestShouldTerminate:
    def test_a_stale_answer_kills_the_task_at_once(self, server, workers, tmp_path):
        operator = Operator(server.client())
        operator.create_run(python_task("t", GATED, str(tmp_path / "never")))
        worker = workers(server, "etl-a")
        ti = wait_until(lambda: (t := operator.find_ti("t"))["state"] == "running" and t, "the task to run")
        pgid = wait_until(lambda: worker.attempt_records() and worker.attempt_records()[0]["pgid"], "its process")
        # A new epoch: this one is stale.
        json_of(operator.post(f"/v1/task-instances/{ti['ti_id']}/mark", json={"state": "success"}))
        wait_until(lambda: not group_alive(pgid), "the next heartbeat's 409 to kill the process group", timeout=5)
        wait_until(lambda: "should_terminate" in worker.output, "the worker to say why")
        assert operator.find_ti("t")["state"] == "success"  # the operator's verdict stands; the worker reported nothing
        assert [a["outcome_kind"] for a in operator.attempts(ti["ti_id"])] == [None]
        assert worker.stop() == 0


class TestGracefulStop:
    def test_sigterm_finishes_what_can_finish_and_hands_back_the_rest_as_worker_lost(self, server, workers, tmp_path):
        operator = Operator(server.client())
        quick, never = tmp_path / "quick", tmp_path / "never"
        operator.create_run(python_task("quick", GATED, str(quick)), python_task("stuck", GATED, str(never)))
        worker = workers(server, "etl-a", "--concurrency", "2", "--grace-period", "1.5")
        wait_until(lambda: all(t["state"] == "running" for t in operator.run()["task_instances"]), "both to run")
        worker.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: "no new claims" in worker.output, "the worker to stop claiming")
        operator.create_run(python_task("later", "print('hi')"), run_id="later")
        quick.touch()
        assert worker.proc.wait(timeout=30) == 0
        tis = {t["task_id"]: t for t in operator.run()["task_instances"]}
        assert tis["quick"]["state"] == "success"
        stuck = tis["stuck"]
        assert (stuck["state"], stuck["try_number"], stuck["infra_attempts"]) == ("scheduled", 1, 1)
        assert (stuck["last_failure_kind"], stuck["last_failure_reason"]) == ("infra", "worker_lost")
        assert "stopped by the worker: it shut down" in operator.log(stuck["ti_id"])
        assert operator.find_ti("later", run_id="later")["state"] == "scheduled"  # never claimed after SIGTERM
