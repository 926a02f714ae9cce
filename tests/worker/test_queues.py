"""`fenceline worker --queues`: a worker runs only the tasks of the queues it serves."""

from tests.support.agents import python_task
from tests.support.api import Operator
from tests.support.waiting import wait_until


def test_a_worker_claims_only_its_queues(server, workers):
    with server.client() as http:
        operator = Operator(http)
        operator.create_run(python_task("cpu", "pass"), python_task("gpu", "pass", queue="gpu"),
                            python_task("io", "pass", queue="io"))

        def states():
            return {ti["task_id"]: ti["state"] for ti in operator.run()["task_instances"]}

        gpu_worker = workers(server, "gpu-1", "--queues", "gpu, default")
        wait_until(lambda: states()["gpu"] == states()["cpu"] == "success", "the gpu and default tasks")
        assert states()["io"] == "scheduled"  # no worker serves io
        assert gpu_worker.stop() == 0
        assert "queues gpu,default" in gpu_worker.output
        workers(server, "io-1", "--queues", "io")
        wait_until(lambda: states()["io"] == "success", "the io task")
