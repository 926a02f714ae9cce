"""The server's log store fills up mid-task: the worker keeps its log on disk, offers it again
with back-off, and every line arrives once when space is freed; the outcome follows its log."""

from tests.support.agents import GATED, python_task
from tests.support.api import Operator
from tests.support.filesystems import LogDisk, tmpfs
from tests.support.waiting import wait_until


class TestFullLogStore:
    def test_the_log_waits_on_the_worker_and_arrives_once(self, serve, workers, tmp_path):
        with tmpfs("1m") as mount:
            server = serve(log_store="file", **({"log_dir": mount} if mount else {}))
            disk = LogDisk(server.app, mount)
            operator = Operator(server.client())
            disk.fill()
            gate = tmp_path / "gate"
            operator.create_run(python_task("t", GATED, str(gate)))
            worker = workers(server, "etl-a")
            ti = wait_until(lambda: (t := operator.find_ti("t"))["state"] == "running" and t, "the task to run")
            wait_until(lambda: "HTTP 507 log-store-full" in worker.output, "an append refused for the full store")
            gate.touch()
            entry = wait_until(lambda: worker.journal(), "the outcome to be journaled")[0]
            assert entry["state"] == "success"
            wait_until(lambda: "retrying with back-off" in worker.output, "the worker to retry its log")
            assert operator.find_ti("t")["state"] == "running"  # the outcome waits for its log
            assert "line 1" not in operator.log(ti["ti_id"])

            disk.free()
            wait_until(lambda: operator.run()["state"] == "success", "the log, then the outcome, to arrive")
            epoch = ti["attempt_epoch"]
            assert operator.log(ti["ti_id"]).splitlines()[1:] == [
                *(f"try=1 epoch={epoch} line {n}" for n in (1, 2, 3)), f"try=1 epoch={epoch} done",
                "[fenceline-worker] exited with status 0: reporting success"]
            assert worker.stop() == 0
