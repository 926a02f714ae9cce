"""A worker killed with SIGKILL mid-task: its task is re-placed on another worker, same try."""

from app.worker.process import group_alive
from tests.support.agents import GATED, python_task
from tests.support.api import Operator, assert_stale, bearer
from tests.support.waiting import wait_until


class TestKilledWorker:
    def test_the_task_moves_to_the_other_worker_and_the_run_succeeds(self, serve, workers, tmp_path):
        # Heartbeats every 0.2 s; a worker silent for 1 s is agent-lost at the next sweep.
        server = serve(agent_lost_after_seconds=1.0)
        operator = Operator(server.client())
        gate = tmp_path / "gate"
        first = workers(server, "etl-a")
        operator.create_run(python_task("victim", GATED, str(gate), retries=0))
        ti = wait_until(lambda: (t := operator.find_ti("victim"))["state"] == "running" and t, "the victim to run")
        wait_until(lambda: "epoch=1 line 3" in operator.log(ti["ti_id"]), "the first lines to be shipped")
        second = workers(server, "etl-b")  # started now, so the first worker surely held the task
        record = wait_until(lambda: first.attempt_records(), "the attempt record")[0]
        killed_token, pgid = record["attempt_token"], record["pgid"]
        assert ti["execution_id"] == operator.execution_of("etl-a")

        first.kill()
        wait_until(lambda: not group_alive(pgid), "the killed worker's task to die with it", timeout=5)
        wait_until(lambda: operator.reap().get("agent_lost"), "the reaper to mark the silent attempt agent-lost")
        replaced = wait_until(lambda: (t := operator.find_ti("victim"))["state"] == "running" and t,
                              "the re-placed run")
        assert replaced["execution_id"] == operator.execution_of("etl-b")
        assert (replaced["try_number"], replaced["infra_attempts"]) == (1, 1)
        gate.touch()
        wait_until(lambda: operator.run()["state"] == "success", "the run to succeed")

        # The killed attempt's late writes are refused and tell it to terminate.
        for path, body in (("/v1/attempts/heartbeat", None), ("/v1/attempts/report", {"state": "success"}),
                           ("/v1/attempts/logs", {"offset": 0, "content": "late\n"})):
            assert_stale(operator.client.post(path, json=body, headers=bearer(killed_token)))

        ti = operator.find_ti("victim")
        assert (ti["state"], ti["try_number"], ti["infra_attempts"]) == ("success", 1, 1)
        assert ti["last_failure_kind"] == "infra"
        attempts = operator.attempts(ti["ti_id"])
        assert [(a["try_number"], a["outcome_kind"], a["reason"]) for a in attempts] == [
            (1, "infra", "agent_lost"), (1, "success", None)]
        assert [str(a["execution_id"]) for a in attempts] == [
            operator.execution_of("etl-a"), operator.execution_of("etl-b")]

        # Every line the killed epoch shipped is in the collapsed log, before the re-place line.
        log = operator.log(ti["ti_id"])
        killed_epoch, new_epoch = attempts[0]["attempt_epoch"], attempts[1]["attempt_epoch"]
        lines = log.splitlines()
        expected = [f"try=1 epoch={killed_epoch} line {n}" for n in (1, 2, 3)]
        assert lines[1:4] == expected, log
        assert lines[4].startswith(f"::fenceline:: try 1 epoch {new_epoch} ") and "agent_lost" in lines[4], log
        assert f"try=1 epoch={new_epoch} done" in lines
        assert lines[-1] == "[fenceline-worker] exited with status 0: reporting success"
        assert second.stop() == 0
