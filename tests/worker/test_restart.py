"""A worker restarted on its state directory: it supersedes its predecessor, kills what the
predecessor left running, and re-delivers outcomes the predecessor journaled but never reported."""

import signal
import sys
from datetime import UTC, datetime

from app.worker.context import CRASH_AFTER_JOURNAL_ENV
from app.worker.process import group_alive
from tests.support.agents import GATED, python_task
from tests.support.api import Operator, json_of
from tests.support.waiting import wait_until

CRASH_AFTER_JOURNAL = {CRASH_AFTER_JOURNAL_ENV: "1"}


def gated_in_a_shell(task_id: str, gate: str) -> dict:
    """The gated program as a shell's background child: it outlives a killed worker (only the
    shell, the direct child, dies with it), so only the restarted worker's sweep can stop it."""
    return {"task_id": task_id, "retry_delay": 0, "payload": {
        "command": ["sh", "-c", '"$1" -c "$2" "$3" & wait', "sh", sys.executable, GATED, gate]}}


class TestRestartSupersedes:
    def test_the_predecessor_is_superseded_and_its_task_re_placed(self, server, workers, tmp_path):
        operator = Operator(server.client())
        gate = tmp_path / "gate"
        first = workers(server, "etl-a")
        operator.create_run(gated_in_a_shell("t", str(gate)))
        ti = wait_until(lambda: (t := operator.find_ti("t"))["state"] == "running" and t, "the task to run")
        wait_until(lambda: "line 3" in operator.log(ti["ti_id"]), "its first lines")
        pgid = first.attempt_records()[0]["pgid"]
        predecessor = operator.execution_of("etl-a")
        first.kill()
        assert group_alive(pgid), "the shell's child outlives the killed worker"

        again = workers(server, "etl-a")
        wait_until(lambda: operator.execution_of("etl-a") != predecessor, "the restarted worker's admission")
        wait_until(lambda: not group_alive(pgid), "the predecessor's leftover process to be killed", timeout=5)
        assert "1 process(es) still running, killed" in again.output
        executions = json_of(operator.get("/v1/seats/etl-a/executions"))["items"]
        assert [(e["generation"], e["superseded"]) for e in executions] == [(1, True), (2, False)]
        assert executions[1]["previous_execution_id"] == predecessor

        assert operator.reap() == {"worker_lost": 1}  # the server's fan-out re-places the predecessor's work
        replaced = wait_until(lambda: (t := operator.find_ti("t"))["state"] == "running" and t, "the re-placed run")
        assert replaced["execution_id"] == executions[1]["execution_id"]
        assert (replaced["try_number"], replaced["infra_attempts"]) == (1, 1)
        gate.touch()
        wait_until(lambda: operator.run()["state"] == "success", "the run to succeed")
        attempts = operator.attempts(ti["ti_id"])
        assert [(a["outcome_kind"], a["reason"], str(a["execution_id"])) for a in attempts] == [
            ("infra", "worker_lost", predecessor), ("success", None, executions[1]["execution_id"])]
        assert again.stop() == 0


class TestJournaledOutcome:
    def _crash_after_journaling(self, server, operator, workers):
        """A worker that journals its task's success and dies before reporting it."""
        first = workers(server, "etl-a", extra_env=CRASH_AFTER_JOURNAL)
        operator.create_run(python_task("t", "print('work done')"))
        assert first.proc.wait(timeout=30) == -signal.SIGKILL
        [entry] = first.journal()
        assert entry["state"] == "success"
        ti = operator.find_ti("t")
        assert ti["state"] == "running"  # the server never heard of the success
        return first, ti

    def test_a_restart_re_delivers_the_success(self, server, workers):
        operator = Operator(server.client())
        first, ti = self._crash_after_journaling(server, operator, workers)

        again = workers(server, "etl-a")
        wait_until(lambda: operator.run()["state"] == "success", "the re-delivered success")
        wait_until(lambda: not again.journal(), "the journal entry to be dropped once acknowledged")
        attempts = operator.attempts(ti["ti_id"])
        assert [(a["attempt_epoch"], a["outcome_kind"]) for a in attempts] == [(ti["attempt_epoch"], "success")]
        assert "work done\n[fenceline-worker] exited with status 0: reporting success" in operator.log(ti["ti_id"])
        assert "re-delivering journaled outcome success" in again.output
        assert again.stop() == 0

    def test_the_re_delivery_is_refused_once_the_task_was_re_placed(self, server, workers):
        operator = Operator(server.client())
        first, ti = self._crash_after_journaling(server, operator, workers)
        # A launcher sees the process gone; the worker-lost sweep re-places its attempt.
        observed = {"phase": "Failed", "reason": "SIGKILL", "exit_code": -9, "terminal": True,
                    "observed_at": datetime.now(UTC).isoformat()}
        resp = operator.patch(f"/v1/executions/{ti['execution_id']}", json={"observation": observed})
        assert resp.status_code == 200, resp.text
        assert operator.reap() == {"worker_lost": 1}

        again = workers(server, "etl-a")
        wait_until(lambda: operator.run()["state"] == "success", "the re-placed attempt to succeed")
        assert "refused as stale (stale-report)" in again.output
        attempts = operator.attempts(ti["ti_id"])
        assert [(a["attempt_epoch"], a["outcome_kind"], a["reason"]) for a in attempts] == [
            (ti["attempt_epoch"], "infra", "worker_lost"), (attempts[1]["attempt_epoch"], "success", None)]
        assert attempts[1]["attempt_epoch"] > ti["attempt_epoch"]
        assert operator.find_ti("t")["try_number"] == 1
        assert again.stop() == 0
