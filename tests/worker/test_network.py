"""The server goes away mid-task, or every call to it hangs: log lines and the outcome wait on
disk and arrive once."""

from types import SimpleNamespace

import pytest

from tests.support.agents import GATED, python_task
from tests.support.api import Operator
from tests.support.tcp_proxy import TcpProxy
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


# Adds a line to the file argv[1] each time it starts, then exits 0 once the gate file argv[2]
# exists (or after 60 s).
COUNTED = """
import pathlib, sys, time
with open(sys.argv[1], "a") as runs:
    runs.write("ran\\n")
gate, deadline = pathlib.Path(sys.argv[2]), time.monotonic() + 60
while not gate.exists() and time.monotonic() < deadline:
    time.sleep(0.02)
"""
# The worker's calls time out after 15 s (app/worker/api.py): the outcome must be on disk long
# before a hung call could have ended.
JOURNALED_WITHIN = 8


class TestNetworkHang:
    @pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "not-idempotent"])
    def test_an_outcome_reached_while_calls_hang_survives_a_kill(self, server, workers, tmp_path, idempotent):
        """The task ends while every call of its worker hangs (a proxy holds them), and the
        worker is SIGKILLed before any of them ends: the outcome was journaled at the task's
        end, so the restarted worker delivers it, and the code ran once."""
        operator = Operator(server.client())
        runs, gate = tmp_path / "runs", tmp_path / "gate"
        with TcpProxy("127.0.0.1", server.port) as proxy:
            through_proxy = SimpleNamespace(url=f"http://127.0.0.1:{proxy.port}")
            operator.create_run(python_task("t", COUNTED, str(runs), str(gate), idempotent=idempotent))
            first = workers(through_proxy, "etl-a")
            ti = wait_until(lambda: (t := operator.find_ti("t"))["state"] == "running" and t, "the task to run")
            proxy.stall()
            wait_until(proxy.held.is_set, "a call of the worker to hang in the proxy")  # it heartbeats every 0.2 s
            gate.touch()
            [entry] = wait_until(first.journal, "the success to be journaled while the calls hang",
                                 timeout=JOURNALED_WITHIN)
            assert entry["state"] == "success"
            first.kill()
            proxy.cut()  # what it held dies with the connections
            proxy.restore()

            again = workers(through_proxy, "etl-a")
            wait_until(lambda: operator.run()["state"] == "success", "the journaled success to be delivered")
        assert "re-delivering journaled outcome success" in again.output
        assert runs.read_text() == "ran\n"
        attempts = operator.attempts(ti["ti_id"])
        assert [(a["attempt_epoch"], a["outcome_kind"]) for a in attempts] == [(ti["attempt_epoch"], "success")]
        assert again.stop() == 0
