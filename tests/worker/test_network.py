"""The server goes away mid-task: log lines and the outcome wait on disk and arrive once."""

from tests.support.agents import GATED, python_task
from tests.support.api import Operator
from tests.support.waiting import wait_until


class TestServerOutage:
    def test_nothing_is_lost_or_doubled_across_an_outage(self, serve, workers, tmp_path):
        server = serve()
        operator = Operator(server.client())
        gate = tmp_path / "gate"
        operator.create_run(python_task("t", GATED, str(gate)))
        worker = workers(server, "etl-a")
        ti = wait_until(lambda: (t := operator.find_ti("t"))["state"] == "running" and t, "the task to run")
        wait_until(lambda: "line 3" in operator.log(ti["ti_id"]), "its first lines")

        server.__exit__(None, None, None)
        gate.touch()  # the task prints its last line and exits while nobody can hear it
        entry = wait_until(lambda: worker.journal(), "the outcome to be journaled")[0]
        assert entry["state"] == "success"
        wait_until(lambda: "retrying with back-off" in worker.output, "the worker to retry its delivery")

        back = serve(port=server.port)
        operator = Operator(back.client())
        wait_until(lambda: operator.run()["state"] == "success", "the outcome to arrive once the server is back")
        epoch = ti["attempt_epoch"]
        lines = operator.log(ti["ti_id"]).splitlines()
        assert lines[1:] == [f"try=1 epoch={epoch} line {n}" for n in (1, 2, 3)] + [
            f"try=1 epoch={epoch} done", "[fenceline-worker] exited with status 0: reporting success"]
        assert [a["outcome_kind"] for a in operator.attempts(ti["ti_id"])] == ["success"]
        wait_until(lambda: not worker.journal(), "the journal entry to go once acknowledged")
        assert worker.stop() == 0
