"""Start-up refusals: each stops the worker with a status and a message that says why."""

from tests.support.api import ADMIN_PASSWORD, Operator
from tests.support.waiting import wait_until


class TestStartup:
    def test_a_launcher_token_admits_without_the_operator_password(self, serve, workers):
        server = serve()
        operator = Operator(server.client())
        token = operator.launcher_token()
        worker = workers(server, "etl-a", extra_env={"FENCELINE_ADMIN_PASSWORD": "", "FENCELINE_LAUNCHER_TOKEN": token})
        wait_until(lambda: operator.get("/v1/seats/etl-a").status_code == 200, "the admission")
        assert worker.stop() == 0

    def test_no_credential_at_all(self, serve, workers):
        worker = workers(serve(), "etl-a", extra_env={"FENCELINE_ADMIN_PASSWORD": ""})
        assert worker.proc.wait(timeout=30) == 2  # a usage error
        assert "a credential is needed to admit the worker" in worker.output

    def test_wrong_operator_credentials(self, serve, workers):
        server = serve()
        worker = workers(server, "etl-a", extra_env={"FENCELINE_ADMIN_PASSWORD": "wrong-" + ADMIN_PASSWORD})
        assert worker.proc.wait(timeout=30) == 1
        assert "operator login as 'admin' refused (401)" in worker.output

    def test_one_worker_per_state_directory(self, serve, workers):
        server = serve()
        operator = Operator(server.client())
        first = workers(server, "etl-a")
        wait_until(lambda: operator.get("/v1/seats/etl-a").status_code == 200, "the first admission")
        second = workers(server, "etl-a")
        assert second.proc.wait(timeout=30) == 1
        assert "another worker is using" in second.output
        assert first.stop() == 0

    def test_a_seat_held_by_another_state_directory(self, serve, workers):
        server = serve()
        operator = Operator(server.client())
        first = workers(server, "etl-a")
        wait_until(lambda: operator.get("/v1/seats/etl-a").status_code == 200, "the first admission")
        intruder = workers(server, "etl-a", state="elsewhere")
        assert intruder.proc.wait(timeout=30) == 3
        assert f"seat 'etl-a' is held by execution {operator.execution_of('etl-a')}" in intruder.output
        assert first.stop() == 0
